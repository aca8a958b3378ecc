// PPO clip / dual-clip, TIS weights and the combined policy loss (policy_loss.h, spec §2-§6).
#include "streamrl/rl/policy_loss.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "streamrl/rl/kl.h"

namespace streamrl::rl {
namespace {

double ratio_or_zero(double num, double den) { return den > 0 ? num / den : 0.0; }

// Advantages [b] or [b, T] as a detached tensor broadcastable against [b, T] logp.
torch::Tensor broadcast_advantages(const torch::Tensor& advantages, const torch::Tensor& logp) {
  const bool per_sequence = advantages.dim() == 1 && advantages.size(0) == logp.size(0);
  TORCH_CHECK(per_sequence || advantages.sizes() == logp.sizes(), "advantages ", advantages.sizes(),
              " must be [b] or [b, T] for logp ", logp.sizes());
  torch::Tensor a = advantages.detach().to(logp.dtype());
  return per_sequence ? a.unsqueeze(1) : a;  // [b, 1] or [b, T]
}

void check_same_shape(const torch::Tensor& t, const torch::Tensor& logp, const char* what) {
  TORCH_CHECK(t.sizes() == logp.sizes(), what, " ", t.sizes(), " must match logp ", logp.sizes());
}

}  // namespace

PpoTokenLoss ppo_clip_loss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                           const torch::Tensor& advantages, const torch::Tensor& mask,
                           const ClipOptions& clip, PolicyRatio ratio_kind) {
  TORCH_CHECK(logp.dim() == 2, "ppo_clip_loss: logp must be [B, T], got ", logp.sizes());
  check_same_shape(old_logp, logp, "old_logp");
  check_same_shape(mask, logp, "mask");
  TORCH_CHECK(clip.dual_clip_c == 0 || clip.dual_clip_c > 1,
              "ppo_clip_loss: dual_clip_c must be 0 (off) or > 1, got ", clip.dual_clip_c);
  const torch::Tensor m = mask.to(torch::kBool);
  const torch::Tensor a = broadcast_advantages(advantages, logp);
  torch::Tensor log_ratio =
      (logp - old_logp.detach()).clamp(-kLogRatioClamp, kLogRatioClamp);  // [B, T]
  if (ratio_kind == PolicyRatio::kSequence) {
    const torch::Tensor mf = m.to(logp.dtype());
    const torch::Tensor seq = ((logp - old_logp.detach()) * mf).sum(1, /*keepdim=*/true) /
                              mf.sum(1, /*keepdim=*/true).clamp_min(1.0);  // [B, 1]
    // Value log s_i at every token, gradient that of logp_t.
    log_ratio = seq.detach().clamp(-kLogRatioClamp, kSequenceLogRatioMax) + logp - logp.detach();
  }
  const torch::Tensor ratio = torch::exp(log_ratio);
  const torch::Tensor unclipped = -a * ratio;
  const torch::Tensor clipped = -a * ratio.clamp(1.0 - clip.eps_low, 1.0 + clip.eps_high);
  // Strictly greater: on a tie the unclipped branch (same value, full gradient) is taken.
  const torch::Tensor clip_taken = clipped > unclipped;
  torch::Tensor loss = torch::where(clip_taken, clipped, unclipped);
  torch::Tensor dual_taken = torch::zeros_like(m);
  if (clip.dual_clip_c > 0) {
    const torch::Tensor cap = -clip.dual_clip_c * a;  // constant: no gradient through the cap
    dual_taken = a.lt(0) & loss.gt(cap);
    loss = torch::where(dual_taken, cap, loss);
  }
  return {loss.masked_fill(~m, 0), ratio.detach(), clip_taken & m, dual_taken & m};
}

TisWeights tis_weights(const torch::Tensor& old_logp, const torch::Tensor& beh_logp,
                       const torch::Tensor& mask, const TisOptions& tis) {
  check_same_shape(beh_logp, old_logp, "beh_logp");
  check_same_shape(mask, old_logp, "mask");
  TORCH_CHECK(tis.lo >= 0 && tis.hi > tis.lo, "tis_weights: need 0 <= lo < hi, got [", tis.lo, ", ",
              tis.hi, "]");
  const torch::Tensor raw =
      torch::exp((old_logp.detach() - beh_logp.detach()).clamp(-kLogRatioClamp, kLogRatioClamp));
  const torch::Tensor inside = raw.ge(tis.lo) & raw.le(tis.hi);
  const torch::Tensor weight =
      tis.mode == TisMode::kTruncate ? raw.clamp(tis.lo, tis.hi) : inside.to(raw.dtype());
  return {weight, raw, ~inside & mask.to(torch::kBool)};
}

void PolicyLossMetrics::merge(const PolicyLossMetrics& o) {
  loss += o.loss;
  policy_term += o.policy_term;
  kl_term += o.kl_term;
  entropy_term += o.entropy_term;
  tokens += o.tokens;
  clipped_tokens += o.clipped_tokens;
  dual_clipped_tokens += o.dual_clipped_tokens;
  ppo_kl_sum += o.ppo_kl_sum;
  ratio_sum += o.ratio_sum;
  ratio_max = std::max(ratio_max, o.ratio_max);
  kl_sum += o.kl_sum;
  entropy_sum += o.entropy_sum;
  tis_weight_sum += o.tis_weight_sum;
  tis_weight_max = std::max(tis_weight_max, o.tis_weight_max);
  tis_outside_tokens += o.tis_outside_tokens;
}

double PolicyLossMetrics::clip_fraction() const { return ratio_or_zero(clipped_tokens, tokens); }
double PolicyLossMetrics::dual_clip_fraction() const {
  return ratio_or_zero(dual_clipped_tokens, tokens);
}
double PolicyLossMetrics::ppo_kl() const { return ratio_or_zero(ppo_kl_sum, tokens); }
double PolicyLossMetrics::ratio_mean() const { return ratio_or_zero(ratio_sum, tokens); }
double PolicyLossMetrics::kl_mean() const { return ratio_or_zero(kl_sum, tokens); }
double PolicyLossMetrics::entropy_mean() const { return ratio_or_zero(entropy_sum, tokens); }
double PolicyLossMetrics::tis_weight_mean() const { return ratio_or_zero(tis_weight_sum, tokens); }
double PolicyLossMetrics::tis_outside_fraction() const {
  return ratio_or_zero(tis_outside_tokens, tokens);
}

PolicyLossOutput compute_policy_loss(const PolicyLossInputs& in, const RlLossConfig& config,
                                     const LossDenominator& denominator) {
  // 1. Which optional terms are active, and are their inputs there?
  const bool kl_in_loss = config.kl.placement == KlPlacement::kLoss && config.kl.coef > 0;
  const bool entropy_in_loss = config.entropy_coef > 0;
  TORCH_CHECK(!kl_in_loss || in.ref_logp.defined(),
              "compute_policy_loss: kl.coef > 0 with placement loss needs ref_logp");
  TORCH_CHECK(!config.tis.enabled || in.beh_logp.defined(),
              "compute_policy_loss: tis.enabled needs beh_logp");
  TORCH_CHECK(!entropy_in_loss || in.entropy.defined(),
              "compute_policy_loss: entropy_coef > 0 needs entropy");
  if (in.ref_logp.defined()) check_same_shape(in.ref_logp, in.logp, "ref_logp");
  if (in.entropy.defined()) check_same_shape(in.entropy, in.logp, "entropy");

  // 2. Policy term, optionally reweighted by the train/inference ratio.
  const PpoTokenLoss ppo =
      ppo_clip_loss(in.logp, in.old_logp, in.advantages, in.mask, config.clip, config.ratio);
  torch::Tensor policy_token = ppo.loss;  // [b, T]
  std::optional<TisWeights> tis;
  if (config.tis.enabled) {
    tis = tis_weights(in.old_logp, in.beh_logp, in.mask, config.tis);
    policy_token = policy_token * tis->weight;
  }

  // 3. KL and entropy per token. A term that is only logged is computed without a graph.
  torch::Tensor total_token = policy_token;
  torch::Tensor kl_token;
  if (in.ref_logp.defined()) {
    const KlEstimator estimator =
        config.kl.placement == KlPlacement::kLoss ? config.kl.estimator : KlEstimator::kK1;
    kl_token = kl_penalty(kl_in_loss ? in.logp : in.logp.detach(), in.ref_logp, estimator);
    if (kl_in_loss) total_token = total_token + config.kl.coef * kl_token;
  }
  if (entropy_in_loss) total_token = total_token - config.entropy_coef * in.entropy;

  // 4. One aggregation for the sum of the terms (§4 rule 5).
  PolicyLossOutput out;
  out.loss = aggregate(total_token, in.mask, config.loss_agg, denominator);

  // 5. Detached metrics, read back in one transfer.
  torch::NoGradGuard no_grad;
  const torch::Tensor m = in.mask.to(torch::kBool);
  auto masked_sum = [&](const torch::Tensor& t) { return t.masked_fill(~m, 0).sum(); };
  auto agg = [&](const torch::Tensor& t) {
    return aggregate(t.detach(), in.mask, config.loss_agg, denominator);
  };
  // Maxima are taken over the masked values filled with 0, valid because ratios and weights are
  // > 0; an empty micro-batch reports 0.
  auto masked_max = [&](const torch::Tensor& t) {
    return t.numel() > 0 ? t.masked_fill(~m, 0).max() : torch::zeros({}, t.options());
  };
  const torch::Tensor zero = torch::zeros({}, in.logp.options());
  std::vector<torch::Tensor> parts = {
      out.loss.detach(),
      agg(policy_token),
      kl_token.defined() ? agg(kl_token) : zero,
      in.entropy.defined() ? agg(in.entropy) : zero,
      m.sum(),
      ppo.clipped.sum(),
      ppo.dual_clipped.sum(),
      masked_sum(in.old_logp.detach() - in.logp.detach()),
      masked_sum(ppo.ratio),
      masked_max(ppo.ratio),
      kl_token.defined() ? masked_sum(kl_token.detach()) : zero,
      in.entropy.defined() ? masked_sum(in.entropy.detach()) : zero,
      tis ? masked_sum(tis->raw) : zero,
      tis ? masked_max(tis->raw) : zero,
      tis ? tis->outside.sum() : zero,
  };
  for (torch::Tensor& p : parts) p = p.to(torch::kDouble);
  const torch::Tensor stats = torch::stack(parts).to(torch::kCPU);
  const double* s = stats.data_ptr<double>();
  PolicyLossMetrics& r = out.metrics;
  r.loss = s[0];
  r.policy_term = s[1];
  r.kl_term = s[2];
  r.entropy_term = s[3];
  r.tokens = s[4];
  r.clipped_tokens = s[5];
  r.dual_clipped_tokens = s[6];
  r.ppo_kl_sum = s[7];
  r.ratio_sum = s[8];
  r.ratio_max = s[9];
  r.kl_sum = s[10];
  r.entropy_sum = s[11];
  r.tis_weight_sum = s[12];
  r.tis_weight_max = s[13];
  r.tis_outside_tokens = s[14];
  return out;
}

}  // namespace streamrl::rl
