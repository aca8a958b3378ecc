// GRPO-family outcome advantages: group-normalised GRPO, Dr.GRPO
// (mean only) and leave-one-out (RLOO, optionally with NeMo-RL's std of the others). One scalar
// per response; the policy loss broadcasts it over the response's tokens.
//
// Edge cases, identical in every mode (§1.3):
//  * Zero variance (every valid reward of the group equal): A = 0 exactly for every member,
//    detected explicitly rather than trusting r - mean to round to 0.
//  * Singleton (one valid reward in the group): A = 0, as NeMo-RL and NeMo-Aligner do (baseline :=
//    reward). A lone sample carries no baseline information; verl's A = r would push the policy by
//    the raw, un-normalised reward, on a different scale from every other group. In streaming,
//    singletons appear when siblings fail to score, so the conservative choice is to learn
//    nothing from them; they still count in the loss denominators and the KL/entropy terms.
//  * Unscorable samples (NaN or infinite reward): left out of the group statistics and given
//    A = 0 (TRL).
// The std is the unbiased (n - 1) estimate and epsilon is added to it (§1.2).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "streamrl/rl/rl_config.h"

namespace streamrl::rl {

// Advantages of one group of responses to the same prompt. Returns one value per reward, in the
// same order. Never throws; an empty group gives an empty result.
std::vector<double> group_advantages(const std::vector<double>& rewards,
                                     const AdvantageOptions& options);

// Advantages of a flat list of samples grouped by `group_ids` (any order, any group sizes), as
// the trainer sees streamed samples. Throws std::invalid_argument when the sizes differ.
std::vector<double> grouped_advantages(const std::vector<double>& rewards,
                                       const std::vector<int64_t>& group_ids,
                                       const AdvantageOptions& options);

// Advantages of equal-size groups: rewards [num_groups, G] (or [G] for one group), floating
// point, on any device. Returns the same shape and dtype, on the CPU.
torch::Tensor grpo_advantages(const torch::Tensor& rewards, const AdvantageOptions& options);

}  // namespace streamrl::rl
