// Per-token KL estimators between the policy and the reference model, for the loss placement,
// and the per-sequence k1 penalty for the reward placement.
#pragma once

#include <torch/torch.h>

#include "streamrl/rl/rl_config.h"

namespace streamrl::rl {

// d = logp - ref_logp is clamped to [-kKlLogRatioClamp, kKlLogRatioClamp] before any estimator,
// and k3 (and the value of k3+) is clamped to [-kK3Clamp, kK3Clamp], as in verl, OpenRLHF, AReaL,
// ROLL and NeMo-RL (§3.1).
inline constexpr double kKlLogRatioClamp = 20.0;
inline constexpr double kK3Clamp = 10.0;

// Per-token KL estimate, [B, T] (any matching shapes), unmasked. Differentiable w.r.t. `logp`;
// `ref_logp` is detached here, so no gradient reaches the reference. Gradients w.r.t. logp per
// token: k1 -> 1, k2 -> d, k3 -> 1 - exp(-d), abs -> sign(d), k3+ -> d (the k2 gradient, whose
// expectation under samples from the policy is the exact gradient of KL(pi || ref); k3's is the
// gradient of the forward KL(ref || pi) instead, i.e. biased for the reverse KL).
// Must be called with grad mode on for the loss placement: under NoGradGuard the term would add
// a value but no gradient (allenai/open-instruct #530).
torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                         KlEstimator estimator);

// The reward placement (§3.2): coef * sum_t m_t * k1_t per sequence, [B], detached, float64. The
// trainer subtracts it from each sequence's reward before computing advantages. Pass the
// log-probs of the policy that generated the sample (old or behaviour log-probs), not the
// current ones: the penalty is part of the reward, not of the graph.
// Simplification for outcome rewards: the per-token formulation puts -coef * k1_t on every token
// and the score on the last, and each token's return is its reward-to-go (gamma = 1). With one
// advantage per sequence (GRPO) we subtract the whole-sequence sum from the score instead, so
// every token sees the penalty of the full response rather than of its own suffix.
// mask [B, T] (bool or 0/1) selects response tokens; padding and prompt tokens add nothing.
torch::Tensor kl_reward_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                const torch::Tensor& mask, double coef);

}  // namespace streamrl::rl
