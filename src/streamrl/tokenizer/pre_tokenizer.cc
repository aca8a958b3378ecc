// Pre-tokenizers, following the semantics of Hugging Face tokenizers' pre_tokenizers/*.rs: pieces
// are cut at regex matches according to a SplitDelimiterBehavior, and empty pieces are dropped.
#include "streamrl/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "streamrl/core/errors.h"
#include "streamrl/tokenizer/byte_level.h"
#include "streamrl/tokenizer/regex.h"
#include "streamrl/tokenizer/spec.h"

namespace streamrl::tokenizer {
namespace {

// GPT-2's pre-tokenization pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name, const std::string& source) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw InputError("unknown split behavior '" + name + "' in " + source);
}

struct Part {
  std::size_t begin, end;
  bool is_match;
};

// Cuts `text` at the matches of `regex` (or between them when `invert`) and passes the pieces to
// `sink`, as NormalizedString::split does.
void split_text(std::string_view text, bool at_start, const Regex& regex, Behavior behavior,
                bool invert, const PieceSink& sink) {
  auto emit = [&](std::size_t begin, std::size_t end) {
    if (end > begin) sink(text.substr(begin, end - begin), at_start && begin == 0);
  };
  if (behavior == Behavior::kIsolated) {  // the hot path (ByteLevel, Llama-3, Qwen2): no buffering
    std::size_t prev = 0;
    regex.for_each_match(text, [&](std::size_t begin, std::size_t end) {
      emit(prev, begin);
      emit(begin, end);
      prev = end;
    });
    emit(prev, text.size());
    return;
  }
  std::vector<Part> parts;
  std::size_t prev = 0;
  regex.for_each_match(text, [&](std::size_t begin, std::size_t end) {
    if (begin > prev) parts.push_back({prev, begin, invert});
    parts.push_back({begin, end, !invert});
    prev = end;
  });
  if (prev < text.size()) parts.push_back({prev, text.size(), invert});

  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) pieces.emplace_back(p.begin, p.end);
      }
      break;
    case Behavior::kContiguous:
      for (const Part& p : parts) {
        if (!pieces.empty() && p.is_match == previous_match) {
          pieces.back().second = p.end;
        } else {
          pieces.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (!pieces.empty() && p.is_match && !previous_match) {
          pieces.back().second = p.end;
        } else {
          pieces.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (!pieces.empty() && it->is_match && !previous_match) {
          pieces.back().first = it->begin;
        } else {
          pieces.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case Behavior::kIsolated:
      break;
  }
  for (const auto& [begin, end] : pieces) emit(begin, end);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  void split(std::string_view text, bool at_start, const PieceSink& sink) const override {
    split_text(text, at_start, *regex_, behavior_, invert_, sink);
  }

 private:
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// Optionally prefixes a space, optionally splits with the GPT-2 pattern, then maps every byte to
// the byte-level alphabet.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& source)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, false, source) : nullptr) {}

  void split(std::string_view text, bool at_start, const PieceSink& sink) const override {
    std::string prefixed;
    if (add_prefix_space_ && !text.starts_with(' ')) {
      prefixed.reserve(text.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(text);
      text = prefixed;
    }
    std::string mapped;
    auto map_piece = [&](std::string_view piece, bool piece_at_start) {
      mapped.clear();
      byte_level::append_mapped(piece, mapped);
      sink(mapped, piece_at_start);
    };
    if (regex_) {
      split_text(text, at_start, *regex_, Behavior::kIsolated, false, map_piece);
    } else if (!text.empty()) {
      map_piece(text, at_start);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// SentencePiece-style: spaces become the replacement character ("▁"), which may also be prepended,
// and each piece starts at a replacement character.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };

  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split,
                        const std::string& source)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        regex_(split ? std::make_unique<Regex>(replacement_, true, source) : nullptr) {}

  void split(std::string_view text, bool at_start, const PieceSink& sink) const override {
    std::string replaced;
    for (char c : text) {
      if (c == ' ') {
        replaced += replacement_;
      } else {
        replaced.push_back(c);
      }
    }
    const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_start);
    if (prepend && !replaced.starts_with(replacement_)) replaced.insert(0, replacement_);
    if (regex_) {
      split_text(replaced, at_start, *regex_, Behavior::kMergedWithNext, false, sink);
    } else if (!replaced.empty()) {
      sink(replaced, at_start);
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}

  void split(std::string_view text, bool at_start, const PieceSink& sink) const override {
    run(0, text, at_start, sink);
  }

 private:
  void run(std::size_t step, std::string_view text, bool at_start, const PieceSink& sink) const {
    if (step == steps_.size()) {
      sink(text, at_start);
      return;
    }
    steps_[step]->split(text, at_start, [&](std::string_view piece, bool piece_at_start) {
      run(step + 1, piece, piece_at_start, sink);
    });
  }

  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::unique_ptr<PreTokenizer> regex_split(std::string_view pattern, Behavior behavior, bool invert,
                                          const std::string& source) {
  return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(pattern, false, source),
                                             behavior, invert);
}

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& spec,
                                                  const std::string& source) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec_type(spec, "pre_tokenizer", source);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(value_or(spec, "add_prefix_space", true),
                                                   value_or(spec, "use_regex", true), source);
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        parse_pattern(spec.at("pattern"), source),
        parse_behavior(spec.at("behavior").get<std::string>(), source),
        value_or(spec, "invert", false));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : spec.at("pretokenizers")) {
      if (auto parsed = parse_pre_tokenizer(step, source)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Metaspace") {
    // Older files carry add_prefix_space instead of prepend_scheme.
    auto prepend = value_or(spec, "add_prefix_space", true)
                       ? MetaspacePreTokenizer::Prepend::kAlways
                       : MetaspacePreTokenizer::Prepend::kNever;
    const std::string scheme = value_or<std::string>(spec, "prepend_scheme", "");
    if (scheme == "first") prepend = MetaspacePreTokenizer::Prepend::kFirst;
    if (scheme == "never") prepend = MetaspacePreTokenizer::Prepend::kNever;
    if (scheme == "always") prepend = MetaspacePreTokenizer::Prepend::kAlways;
    return std::make_unique<MetaspacePreTokenizer>(
        value_or<std::string>(spec, "replacement", "\xE2\x96\x81"), prepend,
        value_or(spec, "split", true), source);
  }
  if (type == "Digits") {
    return regex_split(
        R"(\p{N})",
        value_or(spec, "individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous,
        false, source);
  }
  if (type == "Whitespace") return regex_split(R"(\w+|[^\w\s]+)", Behavior::kRemoved, true, source);
  if (type == "WhitespaceSplit") return regex_split(R"(\s)", Behavior::kRemoved, false, source);
  if (type == "Punctuation") {
    return regex_split(R"([\p{P}!-/:-@\[-`{-~])",
                       parse_behavior(value_or<std::string>(spec, "behavior", "Isolated"), source),
                       false, source);
  }
  throw_unsupported("pre_tokenizer", type, source,
                    "ByteLevel, Split, Sequence, Metaspace, Digits, Whitespace, WhitespaceSplit, "
                    "Punctuation");
}

}  // namespace streamrl::tokenizer
