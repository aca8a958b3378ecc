// PPO clip / dual-clip on hand-made ratios, TIS weights, the KL and entropy terms, and the §7
// invariants: first-step ratio 1, ppo_kl 0, clip fraction 0, masks, split invariance.
#include "streamrl/rl/policy_loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "streamrl/rl/kl.h"
#include "tensor_expect.h"

namespace streamrl::rl {
namespace {

using torch::indexing::Slice;

// One row of tokens with ratios `ratios` (logp = log rho, old_logp = 0), all in the mask.
struct Row {
  torch::Tensor logp, old_logp, mask;
};
Row row_with_ratios(const std::vector<double>& ratios) {
  torch::Tensor logp = torch::tensor(ratios, kF64).log().reshape({1, -1}).requires_grad_(true);
  return {logp, torch::zeros_like(logp.detach()), torch::ones({1, logp.size(1)}, torch::kBool)};
}

// Loss, clipped and dual-clipped flags, and dL/dlogp of ppo_clip_loss on one row.
struct PpoResult {
  torch::Tensor loss, clipped, dual, grad;
};
PpoResult run_ppo(const std::vector<double>& ratios, double advantage, const ClipOptions& clip) {
  Row r = row_with_ratios(ratios);
  const PpoTokenLoss out =
      ppo_clip_loss(r.logp, r.old_logp, torch::tensor({advantage}, kF64), r.mask, clip);
  out.loss.sum().backward();
  return {out.loss.detach(), out.clipped.to(torch::kDouble), out.dual_clipped.to(torch::kDouble),
          r.logp.grad()};
}

TEST(PolicyLoss, PositiveAdvantageClipsAboveOnePlusEps) {
  // L = max(-rho, -clip(rho, 0.8, 1.2)); dL/dlogp = -A * rho where unclipped, 0 where clipped.
  const PpoResult r = run_ppo({0.5, 0.9, 1.1, 1.5}, 1.0, {});
  expect_all_near(r.loss, {-0.5, -0.9, -1.1, -1.2}, 1e-12);
  expect_all_near(r.clipped, {0, 0, 0, 1}, 0);
  expect_all_near(r.grad, {-0.5, -0.9, -1.1, 0}, 1e-12);
}

TEST(PolicyLoss, NegativeAdvantageClipsBelowOneMinusEps) {
  const PpoResult r = run_ppo({0.5, 0.9, 1.1, 1.5}, -1.0, {});
  expect_all_near(r.loss, {0.8, 0.9, 1.1, 1.5}, 1e-12);
  expect_all_near(r.clipped, {1, 0, 0, 0}, 0);
  expect_all_near(r.grad, {0, 0.9, 1.1, 1.5}, 1e-12);
}

TEST(PolicyLoss, AsymmetricClip) {
  ClipOptions clip;
  clip.eps_high = 0.28;
  const PpoResult r = run_ppo({1.25, 1.3}, 2.0, clip);
  expect_all_near(r.loss, {-2.5, -2.56}, 1e-12);
  expect_all_near(r.clipped, {0, 1}, 0);
  const PpoResult low = run_ppo({0.85, 0.75}, -1.0, clip);  // floor stays 0.8
  expect_all_near(low.loss, {0.85, 0.8}, 1e-12);
}

TEST(PolicyLoss, DualClipCapsNegativeAdvantages) {
  ClipOptions clip;
  clip.dual_clip_c = 3.0;
  const PpoResult neg = run_ppo({1.5, 4.0, 0.5}, -1.0, clip);
  expect_all_near(neg.loss, {1.5, 3.0, 0.8}, 1e-12);
  expect_all_near(neg.dual, {0, 1, 0}, 0);
  expect_all_near(neg.clipped, {0, 0, 1}, 0);
  expect_all_near(neg.grad, {1.5, 0, 0}, 1e-12);
  const PpoResult pos = run_ppo({4.0}, 1.0, clip);  // dual-clip never touches A > 0
  expect_all_near(pos.loss, {-1.2}, 1e-12);
  expect_all_near(pos.dual, {0}, 0);
  clip.dual_clip_c = 0.5;
  EXPECT_THROW(run_ppo({1.0}, 1.0, clip), c10::Error);
}

TEST(PolicyLoss, ExtremeLogRatiosAreClampedToFiniteLossAndGradient) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const torch::TensorOptions opts = torch::TensorOptions().dtype(dtype);
    for (double c : {0.0, 3.0}) {
      for (double a : {1.0, -1.0}) {
        torch::Tensor logp = torch::tensor({100.0, -100.0}, opts).reshape({1, 2});
        logp.requires_grad_(true);
        ClipOptions clip;
        clip.dual_clip_c = c;
        const PpoTokenLoss out = ppo_clip_loss(logp, torch::zeros({1, 2}, opts),
                                               torch::tensor({a}, opts), torch::ones({1, 2}), clip);
        out.loss.sum().backward();
        EXPECT_TRUE(torch::isfinite(out.loss).all().item<bool>()) << "A " << a << " c " << c;
        EXPECT_TRUE(torch::isfinite(logp.grad()).all().item<bool>()) << "A " << a << " c " << c;
        EXPECT_NEAR(out.ratio[0][0].item<double>(), std::exp(20.0), std::exp(20.0) * 1e-6);
      }
    }
  }
}

TEST(PolicyLoss, TisWeightsTruncateOrMask) {
  // w = exp(old - beh) = {0.25, 1, 2, 10}; truncation to [0.5, 5] gives {0.5, 1, 2, 5}.
  const torch::Tensor old_logp = torch::zeros({1, 4}, kF64);
  const torch::Tensor beh = -torch::tensor({0.25, 1.0, 2.0, 10.0}, kF64).log().reshape({1, 4});
  const torch::Tensor mask = torch::ones({1, 4}, torch::kBool);
  TisOptions tis;
  tis.enabled = true;
  const TisWeights t = tis_weights(old_logp, beh, mask, tis);
  expect_all_near(t.raw, {0.25, 1, 2, 10}, 1e-12);
  expect_all_near(t.weight, {0.5, 1, 2, 5}, 1e-12);
  expect_all_near(t.outside.to(torch::kDouble), {1, 0, 0, 1}, 0);
  tis.mode = TisMode::kMask;
  expect_all_near(tis_weights(old_logp, beh, mask, tis).weight, {0, 1, 1, 0}, 0);

  // In the loss the weight is a constant factor: each token's gradient is scaled by it.
  Row r = row_with_ratios({1, 1, 1, 1});
  RlLossConfig config;
  config.tis.enabled = true;
  const LossDenominator d = global_denominator({r.mask}, 0);
  const PolicyLossOutput out = compute_policy_loss(
      {r.logp, r.old_logp, torch::tensor({1.0}, kF64), r.mask, {}, beh, {}}, config, d);
  out.loss.backward();
  expect_all_near(r.logp.grad(), {-0.5 / 4, -1.0 / 4, -2.0 / 4, -5.0 / 4}, 1e-12);
  EXPECT_NEAR(out.metrics.tis_weight_mean(), (0.25 + 1 + 2 + 10) / 4, 1e-12);
  EXPECT_NEAR(out.metrics.tis_weight_max, 10, 1e-12);
  EXPECT_NEAR(out.metrics.tis_outside_fraction(), 0.5, 0);
}

// Invariants 1-3: on the first step logp and old_logp are the same numbers, so the ratio is
// exactly 1, ppo_kl exactly 0 and nothing is clipped, whatever the advantages.
TEST(PolicyLoss, FirstStepRatioIsOneAndNothingClips) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    torch::Tensor logp = (-torch::rand({4, 7}) * 5).to(dtype).requires_grad_(true);
    const torch::Tensor adv = torch::randn({4}).to(dtype) * 3;
    const torch::Tensor mask = torch::rand({4, 7}).gt(0.3);
    RlLossConfig config;
    config.clip.dual_clip_c = 1.5;
    config.kl.coef = 0.1;
    config.kl.estimator = KlEstimator::kK3Plus;
    const LossDenominator d = global_denominator({mask}, 0);
    // The very same tensor as old and ref log-probs (recomputed with identical weights).
    const PolicyLossOutput out =
        compute_policy_loss({logp, logp, adv, mask, logp, {}, {}}, config, d);
    const PolicyLossMetrics& m = out.metrics;
    EXPECT_EQ(m.ratio_mean(), 1.0);
    EXPECT_EQ(m.ratio_max, 1.0);
    EXPECT_EQ(m.ppo_kl(), 0.0);
    EXPECT_EQ(m.ppo_kl_sum, 0.0);
    EXPECT_EQ(m.clip_fraction(), 0.0);
    EXPECT_EQ(m.dual_clip_fraction(), 0.0);
    EXPECT_EQ(m.kl_sum, 0.0);
    EXPECT_EQ(m.kl_term, 0.0);
    EXPECT_EQ(m.tokens, mask.sum().item<double>());
    // The loss is -mean(A) over tokens and its gradient -A / N per masked token.
    out.loss.backward();
    const torch::Tensor want = (-adv.unsqueeze(1).expand({4, 7}) / m.tokens).masked_fill(~mask, 0);
    EXPECT_TRUE(torch::allclose(logp.grad(), want, 1e-6, 1e-7));
  }
}

// Padding and prompt positions may hold anything: loss, metrics and gradients ignore them.
TEST(PolicyLoss, MaskedTokensContributeNothing) {
  torch::manual_seed(5);
  const torch::Tensor mask =
      torch::tensor({1, 1, 1, 0, 0, 1, 1, 0}).reshape({2, 4}).to(torch::kBool);
  const torch::Tensor base = -torch::rand({2, 4}, kF64);
  const torch::Tensor garbage = torch::full({2, 4}, -1e4, kF64);
  auto with_padding = [&](const torch::Tensor& t, const torch::Tensor& pad) {
    return torch::where(mask, t, pad);
  };
  RlLossConfig config;
  config.kl.coef = 0.05;
  config.entropy_coef = 0.01;
  config.tis.enabled = true;
  config.clip.dual_clip_c = 3;
  const LossDenominator d = global_denominator({mask}, 0);
  EXPECT_EQ(d.tokens, 5);
  std::vector<PolicyLossOutput> outs;
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& pad : {torch::zeros({2, 4}, kF64), garbage}) {
    torch::Tensor logp = with_padding(base, pad).requires_grad_(true);
    torch::Tensor entropy = with_padding(-base, -pad).requires_grad_(true);
    PolicyLossInputs in{logp,   with_padding(base - 0.1, pad * 2), torch::tensor({1.0, -2.0}, kF64),
                        mask,   with_padding(base + 0.2, -pad),    with_padding(base + 0.3, pad),
                        entropy};
    outs.push_back(compute_policy_loss(in, config, d));
    outs.back().loss.backward();
    EXPECT_TRUE(torch::equal(logp.grad().masked_select(~mask), torch::zeros({3}, kF64)));
    EXPECT_TRUE(torch::equal(entropy.grad().masked_select(~mask), torch::zeros({3}, kF64)));
    grads.push_back(logp.grad());
  }
  EXPECT_DOUBLE_EQ(outs[0].metrics.loss, outs[1].metrics.loss);
  EXPECT_DOUBLE_EQ(outs[0].metrics.kl_sum, outs[1].metrics.kl_sum);
  EXPECT_DOUBLE_EQ(outs[0].metrics.entropy_sum, outs[1].metrics.entropy_sum);
  EXPECT_DOUBLE_EQ(outs[0].metrics.ppo_kl_sum, outs[1].metrics.ppo_kl_sum);
  EXPECT_DOUBLE_EQ(outs[0].metrics.ratio_max, outs[1].metrics.ratio_max);
  EXPECT_DOUBLE_EQ(outs[0].metrics.tis_weight_max, outs[1].metrics.tis_weight_max);
  EXPECT_EQ(outs[1].metrics.tokens, 5);
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

// The KL term must reach the gradient (the open-instruct #530 bug computed it under no_grad):
// grad(with coef) - grad(without) = coef * dk/dlogp / N on each masked token.
TEST(PolicyLoss, KlInTheLossCarriesItsGradient) {
  const torch::Tensor logp0 = torch::tensor({-1.0, -0.5, -2.0, -0.1}, kF64).reshape({1, 4});
  const torch::Tensor ref = torch::tensor({-1.5, -0.5, -1.0, -0.4}, kF64).reshape({1, 4});
  const torch::Tensor mask = torch::ones({1, 4}, torch::kBool);
  const LossDenominator d = global_denominator({mask}, 0);
  const torch::Tensor dd = logp0 - ref;
  auto grad_with = [&](double coef, KlEstimator e) {
    torch::Tensor logp = logp0.clone().requires_grad_(true);
    RlLossConfig config;
    config.kl.coef = coef;
    config.kl.estimator = e;
    const PolicyLossOutput out = compute_policy_loss(
        {logp, logp0, torch::tensor({0.7}, kF64), mask, ref, {}, {}}, config, d);
    out.loss.backward();
    return std::make_pair(logp.grad(), out.metrics);
  };
  const torch::Tensor base = grad_with(0.0, KlEstimator::kK3).first;
  const double coef = 0.3;
  auto [g3, m3] = grad_with(coef, KlEstimator::kK3);
  EXPECT_TRUE(torch::allclose(g3 - base, coef * (1 - torch::exp(-dd)) / 4, 0, 1e-12));
  auto [g3p, m3p] = grad_with(coef, KlEstimator::kK3Plus);
  EXPECT_TRUE(torch::allclose(g3p - base, coef * dd / 4, 0, 1e-12));
  // The KL value in the loss and the metrics is the k3 value for both.
  const double k3_mean = kl_penalty(logp0, ref, KlEstimator::kK3).mean().item<double>();
  EXPECT_NEAR(m3.kl_term, k3_mean, 1e-12);
  EXPECT_NEAR(m3p.kl_mean(), k3_mean, 1e-12);
  EXPECT_NEAR(m3p.loss, m3p.policy_term + coef * k3_mean, 1e-12);
  // With placement reward nothing reaches the loss; the metric reports k1.
  torch::Tensor logp = logp0.clone().requires_grad_(true);
  RlLossConfig reward;
  reward.kl.coef = coef;
  reward.kl.placement = KlPlacement::kReward;
  const PolicyLossOutput out =
      compute_policy_loss({logp, logp0, torch::tensor({0.7}, kF64), mask, ref, {}, {}}, reward, d);
  out.loss.backward();
  EXPECT_TRUE(torch::allclose(logp.grad(), base, 0, 1e-15));
  EXPECT_NEAR(out.metrics.kl_mean(), dd.mean().item<double>(), 1e-12);
  // A KL in the loss without reference log-probs is a caller bug.
  RlLossConfig needs_ref;
  needs_ref.kl.coef = 0.1;
  EXPECT_THROW(compute_policy_loss({logp, logp0, torch::tensor({0.7}, kF64), mask, {}, {}, {}},
                                   needs_ref, d),
               c10::Error);
}

TEST(PolicyLoss, EntropyBonusIsSubtractedAndAggregatedLikeTheLoss) {
  torch::Tensor logp = torch::zeros({2, 3}, kF64).requires_grad_(true);
  torch::Tensor entropy =
      torch::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, kF64).reshape({2, 3}).requires_grad_(true);
  const torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0}).reshape({2, 3}).to(torch::kBool);
  RlLossConfig config;
  config.entropy_coef = 0.1;
  config.loss_agg = LossAggMode::kSeqMeanTokenMean;
  const LossDenominator d = global_denominator({mask}, 0);
  const PolicyLossOutput out = compute_policy_loss(
      {logp, logp.detach(), torch::zeros({2}, kF64), mask, {}, {}, entropy}, config, d);
  out.loss.backward();
  // seq-mean-token-mean of H: (6/3 + 9/2) / 2 = 3.25; token mean 15 / 5 = 3.
  EXPECT_NEAR(out.metrics.entropy_term, 3.25, 1e-12);
  EXPECT_NEAR(out.metrics.entropy_mean(), 3.0, 1e-12);
  EXPECT_NEAR(out.metrics.loss, -0.1 * 3.25, 1e-12);
  expect_all_near(entropy.grad(), {-0.1 / 6, -0.1 / 6, -0.1 / 6, -0.1 / 4, -0.1 / 4, 0}, 1e-12);
}

// Invariant 6 for the whole loss: five sequences of different lengths with every term on, split
// [5], [2, 3] and [1, 1, 3] (each micro-batch padded only to its own longest row). Summed losses,
// merged metrics and the gradients on the logp and entropy leaves match the whole batch.
TEST(PolicyLoss, SplitInvariantForEveryAggregationMode) {
  const std::vector<int64_t> lengths = {6, 2, 4, 1, 3};
  torch::Tensor mask = torch::zeros({5, 6}, torch::kBool);
  for (int64_t i = 0; i < 5; ++i) mask.index_put_({i, Slice(0, lengths[i])}, true);
  torch::manual_seed(11);
  const torch::Tensor logp0 = -torch::rand({5, 6}, kF64) * 2;
  const torch::Tensor old_logp = logp0 + torch::randn({5, 6}, kF64) * 0.3;
  const torch::Tensor ref_logp = logp0 + torch::randn({5, 6}, kF64) * 0.3;
  const torch::Tensor beh_logp = old_logp + torch::randn({5, 6}, kF64) * 0.5;
  const torch::Tensor entropy0 = torch::rand({5, 6}, kF64) * 3;
  const torch::Tensor adv = torch::tensor({1.0, -0.5, 0.0, 2.0, -1.5}, kF64);
  const std::vector<std::vector<int64_t>> splits = {{5}, {2, 3}, {1, 1, 3}};

  for (LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                           LossAggMode::kSeqMeanTokenSumNorm}) {
    RlLossConfig config;
    config.loss_agg = mode;
    config.loss_agg_t_const = 8;
    config.clip.dual_clip_c = 2;
    config.kl.coef = 0.05;
    config.kl.estimator = KlEstimator::kK3Plus;
    config.entropy_coef = 0.01;
    config.tis.enabled = true;
    std::vector<double> totals;
    std::vector<PolicyLossMetrics> metrics;
    std::vector<torch::Tensor> logp_grads, entropy_grads;
    for (const auto& split : splits) {
      torch::Tensor logp = logp0.clone().requires_grad_(true);
      torch::Tensor entropy = entropy0.clone().requires_grad_(true);
      std::vector<PolicyLossInputs> parts;
      std::vector<torch::Tensor> masks;
      int64_t row = 0;
      for (int64_t n : split) {
        int64_t width = 0;
        for (int64_t i = row; i < row + n; ++i) width = std::max(width, lengths[i]);
        auto cut = [&](const torch::Tensor& t) {
          return t.index({Slice(row, row + n), Slice(0, width)});
        };
        parts.push_back({cut(logp), cut(old_logp), adv.index({Slice(row, row + n)}), cut(mask),
                         cut(ref_logp), cut(beh_logp), cut(entropy)});
        masks.push_back(cut(mask));
        row += n;
      }
      const LossDenominator d = global_denominator(masks, config.loss_agg_t_const);
      PolicyLossMetrics merged;
      double total = 0;
      for (const PolicyLossInputs& in : parts) {
        const PolicyLossOutput out = compute_policy_loss(in, config, d);
        out.loss.backward();
        total += out.loss.item<double>();
        merged.merge(out.metrics);
      }
      totals.push_back(total);
      metrics.push_back(merged);
      logp_grads.push_back(logp.grad());
      entropy_grads.push_back(entropy.grad());
    }
    EXPECT_GT(metrics[0].clipped_tokens + metrics[0].dual_clipped_tokens, 0) << name(mode);
    for (size_t s = 1; s < splits.size(); ++s) {
      const std::string where = std::string(name(mode)) + " split " + std::to_string(s);
      EXPECT_NEAR(totals[s], totals[0], 1e-6) << where;
      EXPECT_NEAR(metrics[s].loss, metrics[0].loss, 1e-6) << where;
      EXPECT_NEAR(metrics[s].policy_term, metrics[0].policy_term, 1e-6) << where;
      EXPECT_NEAR(metrics[s].kl_term, metrics[0].kl_term, 1e-6) << where;
      EXPECT_NEAR(metrics[s].entropy_term, metrics[0].entropy_term, 1e-6) << where;
      EXPECT_EQ(metrics[s].tokens, metrics[0].tokens) << where;
      EXPECT_EQ(metrics[s].clip_fraction(), metrics[0].clip_fraction()) << where;
      EXPECT_EQ(metrics[s].dual_clip_fraction(), metrics[0].dual_clip_fraction()) << where;
      EXPECT_NEAR(metrics[s].ppo_kl(), metrics[0].ppo_kl(), 1e-12) << where;
      EXPECT_DOUBLE_EQ(metrics[s].ratio_max, metrics[0].ratio_max) << where;
      EXPECT_DOUBLE_EQ(metrics[s].tis_weight_max, metrics[0].tis_weight_max) << where;
      EXPECT_TRUE(torch::allclose(logp_grads[s], logp_grads[0], 0, 1e-6)) << where;
      EXPECT_TRUE(torch::allclose(entropy_grads[s], entropy_grads[0], 0, 1e-6)) << where;
    }
  }
}

}  // namespace
}  // namespace streamrl::rl
