// The tokenizer interface used by tasks, the engine and the trainer, and the factories that build
// one from a name ("char") or from a Hugging Face tokenizer.json (a file or a checkpoint
// directory).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace streamrl::tokenizer {

// Maps text to token ids and back. Implementations are immutable after construction and every
// method is safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`. Ill-formed UTF-8 is repaired first (each maximal ill-formed subsequence
  // becomes U+FFFD). Special-token strings in `text` (e.g. "<|im_end|>") always encode to their
  // ids. add_special_tokens applies the post-processor (Llama-3 prepends <|begin_of_text|>).
  virtual std::vector<int32_t> encode(std::string_view text,
                                      bool add_special_tokens = false) const = 0;

  // Text of `ids`, always valid UTF-8. Ids without a token are skipped, and so are special tokens
  // when skip_special_tokens.
  virtual std::string decode(const std::vector<int32_t>& ids,
                             bool skip_special_tokens = true) const = 0;

  // One more than the largest id; a model's embedding table needs at least this many rows.
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the tokenizer has none
  virtual int32_t eos_id() const = 0;  // -1 when the tokenizer has none
  virtual int32_t pad_id() const = 0;  // -1 when the tokenizer has none

  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;

  // A Hugging Face tokenizer.json that load_tokenizer() (and the `tokenizers` library) read back
  // into a tokenizer with the same ids, so checkpoints describe themselves.
  virtual std::string to_json() const = 0;
};

// The token ids of a plain-text prompt, the one rule shared by the trainer, evaluation and the
// server: [BOS] (when the tokenizer has one) followed by encode(text). A text that already begins
// with the BOS token (e.g. "<|begin_of_text|>" written out, or a rendered Llama-3 chat prompt)
// gets no second one.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text);

// Loads a byte-level BPE tokenizer.json. `path` is the file itself or a directory holding
// tokenizer.json and, optionally, tokenizer_config.json (bos/eos/pad tokens, add_bos_token,
// add_eos_token). Throws InputError naming the file when it is missing, malformed or uses an
// unsupported feature.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

// "char" builds the built-in character tokenizer; anything else is a path for load_tokenizer().
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name_or_path);

}  // namespace streamrl::tokenizer
