// The unit the RL loop moves from the generator to the trainer. Today a trajectory is one
// completion of one prompt; a multi-turn, tool-using rollout will carry several segments and a
// loss mask here, and grouping, advantages and packing read it through this type only.
#pragma once

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

}  // namespace streamrl::rl
