// The clipped policy-gradient loss of GRPO/PPO with its optional
// terms: KL penalty in the loss (§3), entropy bonus (§5) and train/inference importance sampling
// (§6.2), aggregated with a global denominator (§4). Pure functions over tensors; the trainer
// supplies log-probs, advantages and masks, and owns the model and the optimizer.
//
// Not implemented: decoupled PPO's log-linear proximal approximation, seq-mask-TIS and CISPO
// (§2 "optional variants"); old_logp is always the trainer's recomputed log-probs.
#pragma once

#include <torch/torch.h>

#include "streamrl/rl/loss_aggregation.h"
#include "streamrl/rl/rl_config.h"

namespace streamrl::rl {

// The log-ratio logp - old_logp is clamped to +-kLogRatioClamp before exp (verl, OpenRLHF), so
// an extreme ratio gives a finite loss and gradient.
inline constexpr double kLogRatioClamp = 20.0;
// GSPO clamps the log of its sequence ratio from above at 10.
inline constexpr double kSequenceLogRatioMax = 10.0;

// Per-token PPO loss and what happened at each token.
struct PpoTokenLoss {
  torch::Tensor loss;          // [B, T] L_t, differentiable w.r.t. logp; 0 off the mask
  torch::Tensor ratio;         // [B, T] rho_t = exp(clamped log-ratio), detached
  torch::Tensor clipped;       // [B, T] bool, on the mask: the clipped branch strictly larger
  torch::Tensor dual_clipped;  // [B, T] bool, on the mask: A < 0 and the cap -c*A applied
};

// L_t = max(-A*rho, -A*clip(rho, 1 - eps_low, 1 + eps_high)), then, with dual_clip_c = c > 0,
// L_t = min(L_t, -c*A) where A < 0. Where both branches are equal (rho inside the clip range)
// the unclipped branch is taken, so rho == 1 never counts as clipped. Where the clipped branch or
// the cap is taken the token has no gradient.
// logp [B, T] (with grad), old_logp [B, T] (detached here), advantages [B] (broadcast over T) or
// [B, T] (detached here), mask [B, T] bool or 0/1. Throws c10::Error on shape mismatch or
// dual_clip_c in (0, 1].
// With PolicyRatio::kSequence, rho_t of every token of row i is GSPO's sequence ratio s_i (the
// masked mean of the row's log-ratios, clamped to [-20, 10], exponentiated), straight-through:
// its gradient w.r.t. logp_t is s_i, so a row is clipped as a whole.
PpoTokenLoss ppo_clip_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                           const torch::Tensor& advantages, const torch::Tensor& mask,
                           const ClipOptions& clip, PolicyRatio ratio = PolicyRatio::kToken);

// Train/inference importance weights w_t = exp(old_logp - beh_logp) (§6.2), the log difference
// clamped to +-kLogRatioClamp. All detached: the weight multiplies the loss as a constant.
struct TisWeights {
  torch::Tensor weight;   // [B, T] factor on L_t: clamp(w, lo, hi) (truncate) or 0/1 (mask)
  torch::Tensor raw;      // [B, T] w_t before truncation or masking
  torch::Tensor outside;  // [B, T] bool, on the mask: w_t outside [lo, hi]
};
TisWeights tis_weights(const torch::Tensor& old_logp, const torch::Tensor& beh_logp,
                       const torch::Tensor& mask, const TisOptions& tis);

// One micro-batch of the policy update. All [b, T] tensors share a shape; log-probs are those of
// the response tokens (ScoreOutput.logprobs) and the mask selects the trained ones.
struct PolicyLossInputs {
  torch::Tensor logp;        // [b, T] current policy, with grad
  torch::Tensor old_logp;    // [b, T] policy at the start of the update (detached here)
  torch::Tensor advantages;  // [b] per sequence (or [b, T])
  torch::Tensor mask;        // [b, T] bool or 0/1: 1 on trained response tokens
  torch::Tensor ref_logp;    // [b, T] reference model; optional, required for a KL in the loss
  torch::Tensor beh_logp;    // [b, T] generator's log-probs; optional, required with tis.enabled
  torch::Tensor entropy;     // [b, T] per-token entropy; optional (logged when given), required
                             // with entropy_coef > 0, and then must carry its gradient
};

// Detached statistics of one micro-batch. Combine micro-batches and DP ranks with merge(): the
// *_term fields and `loss` are shares of the aggregated step value (they already carry the
// global denominator) and add up to it; counts and *_sum fields add up and give token means
// through the accessors; *_max fields take the maximum.
struct PolicyLossMetrics {
  double loss = 0;          // what backward sees: policy_term + kl.coef * kl_term (placement
                            // loss) - entropy_coef * entropy_term
  double policy_term = 0;   // agg(w_t * L_t), w_t = 1 without TIS
  double kl_term = 0;       // agg(KL_t), before kl.coef; 0 without ref_logp
  double entropy_term = 0;  // agg(H_t), before entropy_coef; 0 without entropy
  double tokens = 0;        // masked tokens
  double clipped_tokens = 0;
  double dual_clipped_tokens = 0;
  double ppo_kl_sum = 0;      // sum of m * (old_logp - logp)
  double ratio_sum = 0;       // sum of m * rho
  double ratio_max = 0;       // max rho over masked tokens (0 when none)
  double kl_sum = 0;          // sum of m * KL_t: the configured estimator with placement loss, k1
                              // with placement reward
  double entropy_sum = 0;     // sum of m * H_t
  double tis_weight_sum = 0;  // sum of m * w_t (raw); TIS only
  double tis_weight_max = 0;
  double tis_outside_tokens = 0;  // masked tokens with w_t outside [lo, hi]

  void merge(const PolicyLossMetrics& other);
  // Token means of the combined metrics; 0 when there are no tokens.
  double clip_fraction() const;
  double dual_clip_fraction() const;
  double ppo_kl() const;  // exactly 0 when logp == old_logp (spec §7 invariant 2)
  double ratio_mean() const;
  double kl_mean() const;
  double entropy_mean() const;
  double tis_weight_mean() const;
  double tis_outside_fraction() const;
};

struct PolicyLossOutput {
  torch::Tensor loss;  // scalar, differentiable: this micro-batch's share of the step loss
  PolicyLossMetrics metrics;
};

// Per token: l_t = w_t * L_t (PPO, TIS weight w_t) + kl.coef * KL_t (placement loss)
// - entropy_coef * H_t, then aggregate(l, mask, config.loss_agg, denominator): policy loss, KL and
// entropy share one mask and one aggregation (§4 rule 5). Backward `loss` once per micro-batch;
// the gradients summed over the step's micro-batches equal the whole batch's for every mode.
// The KL term is computed from inputs.logp with grad mode as the caller has it, so call this
// with grad enabled for training. Throws c10::Error for mismatched shapes or a missing optional
// input that the config needs.
PolicyLossOutput compute_policy_loss(const PolicyLossInputs& inputs, const RlLossConfig& config,
                                     const LossDenominator& denominator);

}  // namespace streamrl::rl
