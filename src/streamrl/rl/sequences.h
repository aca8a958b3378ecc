// How prompts and completions become token tensors, in one place so that SFT, evaluation, the
// engine and the RL trainer agree: prompt = [BOS] + encode(prompt text); completion = tokens after
// it, ending with EOS when the sample stopped.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::rl {

// [BOS] (when the tokenizer has one) followed by the prompt's tokens.
std::vector<int32_t> encode_prompt(const tokenizer::Tokenizer& tok, const std::string& prompt);

// A right-padded batch of prompt + completion sequences.
struct SequenceBatch {
  torch::Tensor tokens;      // [B, T] int64, 0 at padding
  torch::Tensor valid;       // [B, T] bool, true on real tokens
  torch::Tensor completion;  // [B, T] bool, true on completion tokens (the trained ones)
  int64_t num_completion_tokens = 0;
};

SequenceBatch make_sequence_batch(const std::vector<std::vector<int32_t>>& prompts,
                                  const std::vector<std::vector<int32_t>>& completions);

}  // namespace streamrl::rl
