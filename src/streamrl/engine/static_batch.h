// Batch-at-a-time generation: the Engine with a slot per sample, so every prompt is admitted at the
// first step and decoding runs until the last sample finishes, with no admission in between. Used
// by evaluation and `streamrl generate`.
#pragma once

#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/model/transformer.h"

namespace streamrl::engine {

struct GenerateRequest {
  int64_t request_id = 0;
  std::vector<int32_t> prompt_ids;  // non-empty
  int n = 1;                        // samples drawn from this prompt (prefilled once)
  SamplingParams params;
};

// Returns the samples in request order, then sample index. The uniform for token t of sample i of
// request r is counter_uniform(params.seed, stream(r, i), t), so results do not depend on batch
// composition. Throws InputError when a prompt plus max_new_tokens exceeds the model's positions.
std::vector<Sample> generate_static(model::CausalLM& model,
                                    const std::vector<GenerateRequest>& requests,
                                    int64_t weight_version = 0);

// The RNG stream id of (request, sample index).
uint64_t sample_stream(int64_t request_id, int32_t sample_index);

}  // namespace streamrl::engine
