// Added-token matching: a scan for the leftmost position where some token starts, taking the
// longest token there (the aho-corasick LeftmostLongest rule of Hugging Face, without the
// automaton: models have a few hundred added tokens at most, mostly sharing the first byte '<').
#include "streamrl/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "streamrl/tokenizer/regex.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer {
namespace {

// Rust regex's Unicode \w, which single_word uses to tell word characters.
bool starts_with_word_char(std::string_view text) {
  static const Regex kWordChar(R"([\p{L}\p{Nl}\p{Nd}\p{M}\p{Pc}\x{200C}\x{200D}])", false,
                               "the built-in word-character pattern");
  return !text.empty() && kWordChar.matches_at_start(text);
}

std::size_t last_char_start(std::string_view text) {
  std::size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

// Start of the run of whitespace that ends `text`.
std::size_t trailing_space_start(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = last_char_start(text.substr(0, end)), pos = start;
    if (!unicode::is_whitespace(unicode::next_code_point(text, pos))) break;
    end = start;
  }
  return end;
}

// Length of the run of whitespace that starts `text`.
std::size_t leading_space_len(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t next = pos;
    if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    index_by_id_[token.id] = i;
    id_by_content_[token.content] = token.id;
    if (!token.normalized) {
      add(raw_, token.content, i);
    } else {
      add(normalized_, normalizer ? normalizer->normalize(token.content) : token.content, i);
    }
  }
}

void AddedVocabulary::add(Matcher& matcher, std::string pattern, std::size_t index) {
  if (pattern.empty()) return;
  auto& bucket = matcher.by_first_byte[static_cast<unsigned char>(pattern[0])];
  bucket.emplace_back(std::move(pattern), index);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  matcher.empty = false;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = id_by_content_.find(std::string(content));
  if (it == id_by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split_with(const Matcher& matcher, std::string_view text,
                                 const std::function<void(std::size_t, std::size_t)>& on_text,
                                 const std::function<void(int32_t)>& on_token) const {
  std::size_t emitted = 0;  // text before this offset has been passed on
  std::size_t pos = 0;
  while (pos < text.size() && !matcher.empty) {
    const auto& bucket = matcher.by_first_byte[static_cast<unsigned char>(text[pos])];
    const std::pair<std::string, std::size_t>* match = nullptr;
    for (const auto& candidate : bucket) {
      if (text.substr(pos).starts_with(candidate.first)) {
        match = &candidate;
        break;
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + match->first.size();
    pos = stop;
    const AddedToken& token = tokens_[match->second];
    if (token.single_word) {
      const bool word_before =
          start > 0 && starts_with_word_char(text.substr(last_char_start(text.substr(0, start))));
      const bool word_after = starts_with_word_char(text.substr(stop));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_len(text.substr(stop));
    if (start > emitted) on_text(emitted, start);
    on_token(token.id);
    emitted = pos = stop;
  }
  if (emitted < text.size()) on_text(emitted, text.size());
}

void AddedVocabulary::split(std::string_view text, const Normalizer* normalizer,
                            const std::function<void(std::string_view, bool)>& on_text,
                            const std::function<void(int32_t)>& on_token) const {
  split_with(
      raw_, text,
      [&](std::size_t begin, std::size_t end) {
        const std::string_view stretch = text.substr(begin, end - begin);
        std::string normalized;
        std::string_view piece = stretch;
        if (normalizer) {
          normalized = normalizer->normalize(stretch);
          piece = normalized;
        }
        split_with(
            normalized_, piece,
            [&](std::size_t b, std::size_t e) {
              on_text(piece.substr(b, e - b), begin == 0 && b == 0);
            },
            on_token);
      },
      on_token);
}

}  // namespace streamrl::tokenizer
