// KL estimators k1, k2, k3, abs and k3+ (kl.h, spec §3.1).
#include "streamrl/rl/kl.h"

namespace streamrl::rl {

torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                         KlEstimator estimator) {
  TORCH_CHECK(logp.sizes() == ref_logp.sizes(), "kl_penalty: logp ", logp.sizes(), " and ref_logp ",
              ref_logp.sizes(), " differ in shape");
  const torch::Tensor d = (logp - ref_logp.detach()).clamp(-kKlLogRatioClamp, kKlLogRatioClamp);
  auto k3 = [&] { return (torch::exp(-d) + d - 1).clamp(-kK3Clamp, kK3Clamp); };
  switch (estimator) {
    case KlEstimator::kK1:
      return d;
    case KlEstimator::kK2:
      return 0.5 * d * d;
    case KlEstimator::kK3:
      return k3();
    case KlEstimator::kAbs:
      return d.abs();
    case KlEstimator::kK3Plus: {
      // Straight-through: the forward value is k3, the backward is k2's (d per token).
      const torch::Tensor k2 = 0.5 * d * d;
      return k3().detach() + (k2 - k2.detach());
    }
  }
  TORCH_CHECK(false, "kl_penalty: unknown estimator");
}

torch::Tensor kl_reward_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                const torch::Tensor& mask, double coef) {
  TORCH_CHECK(logp.dim() == 2 && mask.sizes() == logp.sizes(), "kl_reward_penalty: logp ",
              logp.sizes(), " and mask ", mask.sizes(), " must both be [B, T]");
  torch::NoGradGuard no_grad;
  const torch::Tensor k1 = kl_penalty(logp.detach(), ref_logp, KlEstimator::kK1);
  return coef * k1.masked_fill(~mask.to(torch::kBool), 0).to(torch::kDouble).sum(1);  // [B]
}

}  // namespace streamrl::rl
