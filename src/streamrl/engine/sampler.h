// Token sampling for a batch of rows, vectorised over the batch. Randomness is counter-based: the
// uniform for (seed, stream, step) is a hash, so a row's tokens do not depend on which other rows
// share its batch (prefix sharing and continuous batching reproduce batch-of-one results).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "streamrl/engine/sample.h"

namespace streamrl::engine {

// Uniform in [0, 1) from (seed, stream, step): splitmix64 over a combined key.
double counter_uniform(uint64_t seed, uint64_t stream, uint64_t step);

struct SampledTokens {
  torch::Tensor tokens;    // [B] int64
  torch::Tensor logprobs;  // [B] float, log-prob under softmax(logits / temperature)
  // When a row asks for params.top_logprobs: [B, K] the K most likely tokens of every row (K the
  // largest request) and their log-probs under the same distribution; undefined otherwise.
  torch::Tensor top_ids, top_logprobs;
};

// logits [B, V] (any float dtype and device; the outputs stay on that device); one SamplingParams
// and one uniform per row. Greedy rows (temperature 0)
// take the argmax and report its log-prob at temperature 1.
SampledTokens sample_tokens(const torch::Tensor& logits,
                            const std::vector<const SamplingParams*>& params,
                            const std::vector<double>& uniforms);

}  // namespace streamrl::engine
