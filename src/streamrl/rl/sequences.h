// How prompts and completions become token tensors, in one place so that SFT, evaluation, the
// engine and the RL trainer agree: prompt = [BOS] + encode(prompt text), or a chat problem rendered
// by the checkpoint's chat template; completion = tokens after it, ending with a stop token when
// the sample stopped.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/core/packing.h"
#include "streamrl/tasks/task.h"
#include "streamrl/tokenizer/chat_template.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::rl {

// [BOS] (when the tokenizer has one and the text does not begin with it) + encode(prompt).
using tokenizer::encode_prompt;

// How problems are put to one checkpoint's model: the prompt ids, the SFT target ids and the
// tokens that end a completion. A plain prompt follows encode_prompt. A chat problem is rendered
// by the checkpoint's chat template (chat_template.h) and encoded as it is, like HF
// apply_chat_template: the template writes its own BOS (Llama-3's <|begin_of_text|>), so none is
// added. Immutable, hence thread-safe; the tokenizer must outlive it.
class PromptEncoder {
 public:
  // Plain prompts only (no checkpoint, e.g. SFT of a fresh model); stops at the tokenizer's EOS.
  explicit PromptEncoder(const tokenizer::Tokenizer& tok);

  // Plain prompts to the checkpoint in `dir`. Stop tokens: the tokenizer's EOS and the
  // "eos_token_id"s of dir/generation_config.json (InputError when that file is malformed).
  static PromptEncoder for_checkpoint(const tokenizer::Tokenizer& tok,
                                      const std::filesystem::path& dir);

  // For the problems of `task` on the checkpoint in `dir` ("" = none): as for_checkpoint, plus,
  // when `task` is a dataset with chat records, the chat template of dir/tokenizer_config.json,
  // whose end-of-turn token then stops generation too. When the template cannot be loaded, throws
  // InputError "PATH:LINE: ..." naming the first chat record and why (no template, a malformed
  // one, no checkpoint).
  static PromptEncoder for_task(const tokenizer::Tokenizer& tok, const std::filesystem::path& dir,
                                const tasks::Task& task);

  // As for_checkpoint, with the chat template required (InputError from load_chat_template
  // otherwise).
  static PromptEncoder for_chat(const tokenizer::Tokenizer& tok, const std::filesystem::path& dir);

  std::vector<int32_t> prompt_ids(const tasks::Problem& problem) const;
  // Messages rendered with the assistant header appended, then encoded. Throws InputError when
  // this encoder has no chat template.
  std::vector<int32_t> chat_prompt_ids(const std::vector<tokenizer::ChatMessage>& messages) const;

  // The SFT target after prompt_ids(problem): the demonstration (the reference when there is none),
  // then the token that ends it: the template's end-of-turn token for a chat problem (as the
  // template renders an assistant turn), else EOS (none when the tokenizer has no EOS). A
  // multi-turn demonstration (Problem::turns, plain prompts only) is each reply and its end token,
  // trained, then the appended tool results, encoded on their own as a rollout appends them and
  // not trained; InputError for a chat problem with turns.
  struct Target {
    std::vector<int32_t> ids;
    std::vector<uint8_t> trained;  // one flag per id
  };
  Target target(const tasks::Problem& problem) const;

  // Tokens that end a completion, each once, the tokenizer's EOS first.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  bool has_chat_template() const { return chat_.has_value(); }

 private:
  PromptEncoder(const tokenizer::Tokenizer& tok, const std::filesystem::path& dir,
                std::optional<tokenizer::ChatTemplate> chat);
  void add_stop_id(int64_t id);

  const tokenizer::Tokenizer* tok_;
  std::optional<tokenizer::ChatTemplate> chat_;
  int32_t end_of_turn_id_ = -1;  // the chat template's end-of-turn token; -1 without a template
  std::vector<int32_t> stop_ids_;
};

// A right-padded batch of prompt + completion sequences.
struct SequenceBatch {
  torch::Tensor tokens;      // [B, T] int64, 0 at padding
  torch::Tensor valid;       // [B, T] bool, true on real tokens
  torch::Tensor completion;  // [B, T] bool, true on completion tokens (the trained ones)
  int64_t num_completion_tokens = 0;
};

// `trained`, when given, holds per row one flag per completion token (empty: all trained); a 0
// (a multi-turn sample's appended tool result) is context only, outside `completion` and the count.
SequenceBatch make_sequence_batch(const std::vector<std::vector<int32_t>>& prompts,
                                  const std::vector<std::vector<int32_t>>& completions,
                                  const std::vector<const std::vector<uint8_t>*>& trained = {});

// Micro-batches within a token budget, longest first (core/packing.h), shared with the planner.
using core::pack_by_token_budget;

}  // namespace streamrl::rl
