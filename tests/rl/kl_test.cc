// KL estimators: hand values, clamps, per-token gradients (autograd vs finite differences) and the
// gradient direction on an exact categorical policy (spec §3.1, §7 "KL gradient direction").
#include "streamrl/rl/kl.h"
#include "tensor_expect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace streamrl::rl {
namespace {

// d = logp - ref_logp for each column.
const std::vector<double> kD = {-1.0, 0.0, 0.5, 2.0};

torch::Tensor values(KlEstimator e, const std::vector<double>& d) {
  const torch::Tensor logp = torch::tensor(d, kF64).reshape({1, -1});
  return kl_penalty(logp, torch::zeros_like(logp), e).reshape({-1});
}

// d(k)/d(logp) per token by autograd.
torch::Tensor autograd_grad(KlEstimator e, const std::vector<double>& d) {
  torch::Tensor logp = torch::tensor(d, kF64).reshape({1, -1}).requires_grad_(true);
  kl_penalty(logp, torch::zeros_like(logp), e).sum().backward();
  return logp.grad().reshape({-1});
}

TEST(Kl, HandValues) {
  expect_all_near(values(KlEstimator::kK1, kD), {-1, 0, 0.5, 2}, 0);
  expect_all_near(values(KlEstimator::kK2, kD), {0.5, 0, 0.125, 2}, 0);
  // exp(-d) + d - 1: e - 2, 0, exp(-0.5) - 0.5, exp(-2) + 1.
  const std::vector<double> k3 = {0.718281828459, 0, 0.106530659713, 1.135335283237};
  expect_all_near(values(KlEstimator::kK3, kD), k3, 1e-12);
  expect_all_near(values(KlEstimator::kAbs, kD), {1, 0, 0.5, 2}, 0);
  expect_all_near(values(KlEstimator::kK3Plus, kD), k3, 1e-12);
}

TEST(Kl, ZeroWhenPolicyEqualsReference) {
  const torch::Tensor logp = torch::randn({3, 5}, kF64).requires_grad_(true);
  for (KlEstimator e : {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kAbs,
                        KlEstimator::kK3Plus}) {
    EXPECT_TRUE(torch::equal(kl_penalty(logp, logp, e), torch::zeros({3, 5}, kF64)));
  }
}

TEST(Kl, ClampsKeepExtremesFinite) {
  // d = -30 is clamped to -20, where k3 = e^20 - 21 is clamped to 10; d = 30 -> 19 -> 10.
  expect_all_near(values(KlEstimator::kK3, {-30.0, 30.0}), {10, 10}, 0);
  expect_all_near(values(KlEstimator::kK1, {-100.0, 100.0}), {-20, 20}, 0);
  expect_all_near(values(KlEstimator::kK2, {-100.0, 100.0}), {200, 200}, 0);
  for (KlEstimator e : {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kAbs,
                        KlEstimator::kK3Plus}) {
    const torch::Tensor g = autograd_grad(e, {-100.0, 100.0});
    EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
    EXPECT_TRUE(torch::equal(g, torch::zeros({2}, kF64))) << name(e);  // outside the clamp
  }
}

TEST(Kl, AutogradMatchesFiniteDifferencesAndTheAnalyticGradient) {
  const double h = 1e-6;
  for (KlEstimator e : {KlEstimator::kK1, KlEstimator::kK2, KlEstimator::kK3, KlEstimator::kAbs}) {
    const torch::Tensor g = autograd_grad(e, kD);
    for (size_t i = 0; i < kD.size(); ++i) {
      if (e == KlEstimator::kAbs && kD[i] == 0) continue;  // |d| has no derivative at 0
      const double fd =
          (values(e, {kD[i] + h})[0].item<double>() - values(e, {kD[i] - h})[0].item<double>()) /
          (2 * h);
      EXPECT_NEAR(g[i].item<double>(), fd, 1e-6) << name(e) << " d " << kD[i];
    }
  }
  // Analytic: k1 -> 1, k2 -> d, k3 -> 1 - exp(-d).
  expect_all_near(autograd_grad(KlEstimator::kK1, kD), {1, 1, 1, 1}, 0);
  expect_all_near(autograd_grad(KlEstimator::kK2, kD), kD, 1e-15);
  std::vector<double> k3_grad;
  for (double d : kD) k3_grad.push_back(1 - std::exp(-d));
  expect_all_near(autograd_grad(KlEstimator::kK3, kD), k3_grad, 1e-12);
  // k3+ is straight-through: the value of k3 but the gradient of k2, not of its own value.
  expect_all_near(autograd_grad(KlEstimator::kK3Plus, kD), kD, 1e-15);
}

// Exact check of what each estimator's gradient estimates: a categorical policy pi = softmax(theta)
// over 5 tokens, every token "sampled" with its probability as a (detached) weight. Then
// sum_v pi_v * grad k(d_v) is the expected per-sample gradient. k2 / k3+ must give the gradient of
// the reverse KL(pi || ref), k3 the gradient of the forward KL(ref || pi), k1 zero.
TEST(Kl, GradientDirectionOnACategoricalPolicy) {
  const torch::Tensor theta0 = torch::tensor({0.3, -0.2, 1.1, 0.0, -0.7}, kF64);
  const torch::Tensor ref_logp =
      torch::log_softmax(torch::tensor({0.0, 0.4, 0.2, -0.5, 0.1}, kF64), 0);

  auto expected_grad = [&](KlEstimator e) {
    torch::Tensor theta = theta0.clone().requires_grad_(true);
    const torch::Tensor logp = torch::log_softmax(theta, 0);
    const torch::Tensor k = kl_penalty(logp.unsqueeze(0), ref_logp.unsqueeze(0), e).squeeze(0);
    (logp.exp().detach() * k).sum().backward();
    return theta.grad();
  };
  auto finite_diff = [&](const std::function<double(const torch::Tensor&)>& f) {
    const double h = 1e-6;
    torch::Tensor g = torch::zeros_like(theta0);
    for (int64_t i = 0; i < theta0.numel(); ++i) {
      torch::Tensor up = theta0.clone(), down = theta0.clone();
      up[i] += h;
      down[i] -= h;
      g[i] = (f(up) - f(down)) / (2 * h);
    }
    return g;
  };
  const torch::Tensor reverse_kl_grad = finite_diff([&](const torch::Tensor& theta) {
    const torch::Tensor logp = torch::log_softmax(theta, 0);
    return (logp.exp() * (logp - ref_logp)).sum().item<double>();
  });
  const torch::Tensor forward_kl_grad = finite_diff([&](const torch::Tensor& theta) {
    const torch::Tensor logp = torch::log_softmax(theta, 0);
    return (ref_logp.exp() * (ref_logp - logp)).sum().item<double>();
  });

  EXPECT_TRUE(torch::allclose(expected_grad(KlEstimator::kK2), reverse_kl_grad, 0, 1e-8));
  EXPECT_TRUE(torch::allclose(expected_grad(KlEstimator::kK3Plus), reverse_kl_grad, 0, 1e-8));
  EXPECT_TRUE(torch::allclose(expected_grad(KlEstimator::kK3), forward_kl_grad, 0, 1e-8));
  EXPECT_GT((expected_grad(KlEstimator::kK3) - reverse_kl_grad).abs().max().item<double>(), 1e-2);
  EXPECT_TRUE(
      torch::allclose(expected_grad(KlEstimator::kK1), torch::zeros_like(theta0), 0, 1e-12));
  // The reverse-KL gradient is a descent direction for the KL itself.
  EXPECT_GT(reverse_kl_grad.norm().item<double>(), 1e-2);
}

TEST(Kl, RewardPenaltyIsAMaskedDetachedK1Sum) {
  const torch::Tensor logp =
      torch::tensor({0.5, -1.0, 7.0, 0.25, 0.25, 0.0}, kF64).reshape({2, 3}).requires_grad_(true);
  const torch::Tensor ref = torch::zeros({2, 3}, kF64);
  const torch::Tensor mask = torch::tensor({1, 1, 0, 1, 1, 1}).reshape({2, 3}).to(torch::kBool);
  const torch::Tensor p = kl_reward_penalty(logp, ref, mask, 0.1);
  EXPECT_FALSE(p.requires_grad());
  EXPECT_EQ(p.sizes(), (std::vector<int64_t>{2}));
  EXPECT_NEAR(p[0].item<double>(), 0.1 * (0.5 - 1.0), 1e-15);  // the 7.0 is masked out
  EXPECT_NEAR(p[1].item<double>(), 0.1 * 0.5, 1e-15);
}

}  // namespace
}  // namespace streamrl::rl
