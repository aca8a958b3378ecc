// Loss aggregation with a global denominator: each
// micro-batch contributes (its masked sum) / (a count over the whole optimizer step), so the
// gradients summed over micro-batches equal those of the whole batch however it was split.
//
// Trainer protocol for one optimizer step:
//  1. Before the first backward, build the LossDenominator from the masks of every micro-batch of
//     the step (global_denominator) and sum `tokens` and `sequences` across DP ranks.
//  2. For each micro-batch, backward aggregate(...) (or compute_policy_loss's loss); gradients
//     accumulate by summation.
//  3. The DP gradient all-reduce must sum. If it averages, multiply the loss by dp_size.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "streamrl/rl/rl_config.h"

namespace streamrl::rl {

// Counts over the whole optimizer step (all micro-batches, all DP ranks).
struct LossDenominator {
  double tokens = 0;     // masked (trained) tokens
  double sequences = 0;  // sequences with at least one masked token; empty rows do not count
  double t_const = 0;    // T_const of seq-mean-token-sum-norm (config loss_agg_t_const)
};

// Counts of the masks of one rank's micro-batches, each [b_k, T_k] (bool or 0/1; widths may
// differ). `t_const` is copied through.
LossDenominator global_denominator(const std::vector<torch::Tensor>& masks, double t_const);

// One micro-batch's share of the step loss, a differentiable scalar:
//   token-mean:              sum m*l / tokens
//   seq-mean-token-mean:     sum_i [sum_t m*l / sum_t m] / sequences  (empty rows add 0)
//   seq-mean-token-sum-norm: sum m*l / (sequences * t_const)
// per_token [b, T] floating point, mask [b, T] bool or 0/1. Masked-out positions contribute
// neither value nor gradient, whatever they hold. A zero count in `denominator` is allowed only
// when this micro-batch has no masked token either (the result is then 0); otherwise, and for
// t_const <= 0 in seq-mean-token-sum-norm, throws c10::Error (a caller bug).
torch::Tensor aggregate(const torch::Tensor& per_token, const torch::Tensor& mask, LossAggMode mode,
                        const LossDenominator& denominator);

}  // namespace streamrl::rl
