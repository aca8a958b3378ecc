// The built-in character tokenizer of the arithmetic/reasoning tasks: one id per printable ASCII
// character and newline, after four special tokens. It saves itself as an equivalent Hugging Face
// tokenizer.json (a BPE model without merges).
#pragma once

#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::tokenizer {

class CharTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kPadId = 0;  // "<pad>"
  static constexpr int32_t kBosId = 1;  // "<bos>"
  static constexpr int32_t kEosId = 2;  // "<eos>"
  static constexpr int32_t kUnkId = 3;  // "<unk>": any character outside the alphabet
  static constexpr int32_t kNewlineId = 4;
  static constexpr int32_t kFirstPrintableId = 5;  // ' ' (0x20); '~' (0x7E) is 99
  static constexpr int32_t kVocabSize = kFirstPrintableId + ('~' - ' ' + 1);

  // Every code point outside the alphabet (non-ASCII, tab, ...) encodes to one <unk>.
  // add_special_tokens prepends <bos>.
  std::vector<int32_t> encode(std::string_view text,
                              bool add_special_tokens = false) const override;

  // With skip_special_tokens, <pad>/<bos>/<eos> are dropped and <unk> decodes to U+FFFD (it
  // stands for a lost character); without it every special token decodes to its name, exactly as
  // the generic loader decodes to_json().
  std::string decode(const std::vector<int32_t>& ids,
                     bool skip_special_tokens = true) const override;

  int32_t vocab_size() const override { return kVocabSize; }
  int32_t bos_id() const override { return kBosId; }
  int32_t eos_id() const override { return kEosId; }
  int32_t pad_id() const override { return kPadId; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  std::string to_json() const override;
};

}  // namespace streamrl::tokenizer
