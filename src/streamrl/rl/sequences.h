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

// Splits items of the given lengths into micro-batches whose padded size (rows x longest row)
// stays within `token_budget`, grouping similar lengths (longest first) so long-tailed batches do
// not pad every row to the longest one. An item longer than the budget gets a micro-batch alone.
// Returns indices into `lengths`; every index appears exactly once.
std::vector<std::vector<size_t>> pack_by_token_budget(const std::vector<int64_t>& lengths,
                                                      int64_t token_budget);

}  // namespace streamrl::rl
