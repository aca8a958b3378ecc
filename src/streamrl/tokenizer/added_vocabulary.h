// The added_tokens of tokenizer.json (special tokens such as "<|im_start|>" and user-added words):
// they are cut out of the input before normalization and pre-tokenization, leftmost-longest first,
// as Hugging Face's tokenizer/added_vocabulary.rs does.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "streamrl/tokenizer/normalizer.h"

namespace streamrl::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // match only when not inside a word
  bool lstrip = false;       // absorb the whitespace on its left
  bool rstrip = false;       // absorb the whitespace on its right
  bool normalized = false;   // match against normalized text instead of the raw input
  bool special = false;      // skipped by decode(skip_special_tokens=true)
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) normalizes the content of tokens with normalized=true; it is used
  // only during construction.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits `text` (valid UTF-8): raw-matched tokens are cut out first, every stretch between them
  // is normalized, then normalized-matched tokens are cut out of that. Calls on_token(id) for each
  // token and on_text(piece, at_start) for each non-empty normalized stretch, in input order;
  // at_start is true for a stretch that begins the input. Thread-safe.
  void split(std::string_view text, const Normalizer* normalizer,
             const std::function<void(std::string_view, bool)>& on_text,
             const std::function<void(int32_t)>& on_token) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Tokens of one kind (raw or normalized), indexed by first byte, longest first.
  struct Matcher {
    std::array<std::vector<std::pair<std::string, std::size_t>>, 256> by_first_byte;  // index
    bool empty = true;
  };

  void split_with(const Matcher& matcher, std::string_view text,
                  const std::function<void(std::size_t, std::size_t)>& on_text,
                  const std::function<void(int32_t)>& on_token) const;
  static void add(Matcher& matcher, std::string pattern, std::size_t index);

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, std::size_t> index_by_id_;
  std::unordered_map<std::string, int32_t> id_by_content_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace streamrl::tokenizer
