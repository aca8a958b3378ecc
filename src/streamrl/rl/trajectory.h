// The unit the RL loop moves from the generator to the trainer. Today a trajectory is one
// completion of one prompt; a multi-turn, tool-using rollout will carry several segments and a
// loss mask here, and grouping, advantages and packing read it through this type only.
#pragma once

#include <string>
#include <vector>

#include "streamrl/engine/sample.h"

namespace streamrl::rl {

// A finished sample with the trainer's per-sample results attached.
struct ScoredSample {
  engine::Sample sample;
  double score = 0;      // the verifier's reward in [0, 1]
  double reward = 0;     // score after any shaping (KL in the reward); advantages use this
  double advantage = 0;  // filled once the sample's group is complete
  int difficulty = 0;    // of the problem, for metrics
  std::vector<float> ref_logprobs;  // [output_ids.size()]; empty when no reference model is used
};

// Samples as bytes between trainer ranks (a pipeline replica's stages gather each other's): ids,
// tokens, log-probs, loss mask and the trainer's results. Not kept: timings, top log-probs and
// MoE routing. decode_samples throws RuntimeFailure on truncated or malformed bytes.
std::string encode_samples(const std::vector<ScoredSample>& samples);
std::vector<ScoredSample> decode_samples(const std::string& bytes);

}  // namespace streamrl::rl
