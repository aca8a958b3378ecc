// A Hugging Face tokenizer.json with a BPE model (GPT-2, Llama-3, Qwen2/Qwen3, SentencePiece-style
// byte-fallback BPE): added tokens, normalizer, pre-tokenizer, model, post-processor and decoder,
// composed as in the `tokenizers` library so that ids match it exactly.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::tokenizer {

class AddedVocabulary;
class BpeModel;
class Decoder;
class Normalizer;
class PreTokenizer;

// What tokenizer_config.json says about special tokens. A token field is unset when the file does
// not mention it and empty when the file says null (the tokenizer has no such token).
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<bool> add_bos_token;  // when either is set, they replace the post-processor
  std::optional<bool> add_eos_token;
};

// Parses a tokenizer_config.json text; `source` names it in errors (InputError).
TokenizerConfig parse_tokenizer_config(const std::string& json_text, const std::string& source);

class BpeTokenizer : public Tokenizer {
 public:
  // Parses a tokenizer.json text. `source` (usually its path) names it in errors. Throws
  // InputError on malformed JSON, a model other than BPE, an unsupported component type, a merge
  // naming an unknown token, or a special token of `config` missing from the vocabulary.
  // Without `config`, bos/eos/pad are taken from the post-processor template and from common names
  // ("<|begin_of_text|>", "<s>", "<|endoftext|>", "</s>", "<pad>", ...).
  BpeTokenizer(std::string json_text, const std::string& source,
               const TokenizerConfig& config = {});
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text,
                              bool add_special_tokens = false) const override;
  std::string decode(const std::vector<int32_t>& ids,
                     bool skip_special_tokens = true) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  // The tokenizer.json text this tokenizer was built from, unchanged.
  std::string to_json() const override { return json_text_; }

 private:
  // One element of the post-processing template: the encoded text, or fixed special-token ids.
  struct TemplateItem {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };

  using Template = std::vector<TemplateItem>;

  // The single-sequence template of a "post_processor" value; unset when it adds no ids.
  static std::optional<Template> parse_post_processor(const nlohmann::json& spec,
                                                      const std::string& source);
  void resolve_special_tokens(const TokenizerConfig& config, const std::string& source);

  std::string json_text_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  std::optional<Template> template_;  // unset: add_special_tokens adds nothing
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = -1;
};

}  // namespace streamrl::tokenizer
