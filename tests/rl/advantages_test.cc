// GRPO / Dr.GRPO / RLOO advantages against hand-computed values, and the §1.3 edge cases
// (zero variance, singletons, NaN rewards) in every mode.
#include "streamrl/rl/advantages.h"
#include "tensor_expect.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace streamrl::rl {
namespace {

AdvantageOptions options(bool norm_by_std, bool leave_one_out, double epsilon = 1e-6) {
  AdvantageOptions o;
  o.norm_by_std = norm_by_std;
  o.leave_one_out = leave_one_out;
  o.epsilon = epsilon;
  return o;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

TEST(Advantages, GrpoOnOneZeroZeroOne) {
  // mean 0.5, unbiased std sqrt(1/3) = 0.57735: A = +-0.5 / (0.57735 + 1e-6) = +-0.866024.
  const std::vector<double> a = group_advantages({1, 0, 0, 1}, options(true, false));
  const double want = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  expect_near(a, {want, -want, -want, want}, 1e-12);
  EXPECT_NEAR(a[0], 0.866025, 2e-6);
}

TEST(Advantages, GrpoOnQuarterSteps) {
  // {0.1, 0.2, 0.3, 0.4}: mean 0.25, unbiased std sqrt(0.05 / 3) = 0.1290994.
  const std::vector<double> a = group_advantages({0.1, 0.2, 0.3, 0.4}, options(true, false, 0));
  expect_near(a, {-1.161895, -0.387298, 0.387298, 1.161895}, 1e-6);
}

TEST(Advantages, DrGrpoSubtractsTheMeanOnly) {
  expect_near(group_advantages({1, 0, 0, 1}, options(false, false)), {0.5, -0.5, -0.5, 0.5}, 1e-15);
  expect_near(group_advantages({0.1, 0.2, 0.3, 0.4}, options(false, false)),
              {-0.15, -0.05, 0.05, 0.15}, 1e-15);
}

TEST(Advantages, LeaveOneOutWithoutStd) {
  // r = 1: others {0, 0, 1}, baseline 1/3; r = 0: others {1, 0, 1}, baseline 2/3.
  // Same as G / (G - 1) * (r - mean) = 4/3 * 0.5.
  expect_near(group_advantages({1, 0, 0, 1}, options(false, true)),
              {2.0 / 3, -2.0 / 3, -2.0 / 3, 2.0 / 3}, 1e-15);
}

TEST(Advantages, LeaveOneOutWithStdOfTheOthers) {
  // Others of r = 1 are {0, 0, 1}: mean 1/3, unbiased std sqrt(1/3); symmetric for r = 0.
  const double want = (2.0 / 3) / (std::sqrt(1.0 / 3.0) + 1e-6);
  expect_near(group_advantages({1, 0, 0, 1}, options(true, true)), {want, -want, -want, want},
              1e-12);
  // {1, 0, 0}: the others of r = 1 are {0, 0}, std 0, so no division: A = 1 - 0. The others of
  // each 0 are {1, 0}: mean 0.5, std sqrt(0.5).
  const double zero_adv = -0.5 / (std::sqrt(0.5) + 1e-6);
  expect_near(group_advantages({1, 0, 0}, options(true, true)), {1.0, zero_adv, zero_adv}, 1e-12);
  // G = 2: a single other reward has no std (NeMo-RL's nan_to_num): A = r_i - r_j.
  expect_near(group_advantages({1, 0}, options(true, true)), {1.0, -1.0}, 0);
}

TEST(Advantages, EpsilonIsAddedToTheUnbiasedStd) {
  // {0, 1}: unbiased std sqrt(0.5) = 0.7071068.
  expect_near(group_advantages({0, 1}, options(true, false, 0)), {-0.7071068, 0.7071068}, 1e-7);
  const double want = 0.5 / (std::sqrt(0.5) + 0.5);
  expect_near(group_advantages({0, 1}, options(true, false, 0.5)), {-want, want}, 1e-15);
  // A tiny spread is not zero variance: with epsilon it stays bounded.
  const std::vector<double> a = group_advantages({0, 1e-9}, options(true, false, 1e-6));
  EXPECT_NEAR(a[1], 0.5e-9 / (std::sqrt(0.5) * 1e-9 + 1e-6), 1e-9);
  EXPECT_LT(std::abs(a[1]), 1e-3);
}

TEST(Advantages, ZeroVarianceIsExactlyZeroInEveryMode) {
  // 0.1 and 0.3 are not representable, so r - mean would not round to 0 on its own.
  const std::vector<std::vector<double>> groups = {
      {1, 1, 1, 1}, {0, 0, 0}, {0.1, 0.1, 0.1}, std::vector<double>(7, 0.3), {0.1, kNan, 0.1}};
  for (const auto& rewards : groups) {
    for (bool norm : {true, false}) {
      for (bool loo : {true, false}) {
        for (double eps : {0.0, 1e-6, 1e-4}) {
          for (double a : group_advantages(rewards, options(norm, loo, eps))) {
            EXPECT_EQ(a, 0.0) << "norm " << norm << " loo " << loo << " eps " << eps;
          }
        }
      }
    }
  }
}

TEST(Advantages, SingletonGetsZero) {
  for (bool norm : {true, false}) {
    for (bool loo : {true, false}) {
      EXPECT_EQ(group_advantages({0.7}, options(norm, loo)), std::vector<double>{0.0});
      // Only one scorable sample left is a singleton too.
      EXPECT_EQ(group_advantages({kNan, 3.0}, options(norm, loo)), (std::vector<double>{0.0, 0.0}));
    }
  }
  EXPECT_TRUE(group_advantages({}, options(true, false)).empty());
}

TEST(Advantages, NanRewardIsExcludedAndGetsZero) {
  const std::vector<double> a = group_advantages({1, kNan, 0, 0, 1}, options(true, false));
  const double want = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  expect_near(a, {want, 0.0, -want, -want, want}, 1e-12);
  EXPECT_EQ(a[1], 0.0);
  const std::vector<double> inf =
      group_advantages({1, std::numeric_limits<double>::infinity(), 0, 0, 1}, options(true, false));
  expect_near(inf, {want, 0.0, -want, -want, want}, 1e-12);
}

TEST(Advantages, GroupedByIdInAnyOrder) {
  // Two interleaved groups: {1, 0, 0, 1} (id 7) and {2, 4} (id 3).
  const std::vector<double> a =
      grouped_advantages({1, 2, 0, 0, 4, 1}, {7, 3, 7, 7, 3, 7}, options(false, false));
  expect_near(a, {0.5, -1.0, -0.5, -0.5, 1.0, 0.5}, 1e-15);
  EXPECT_THROW(grouped_advantages({1, 2}, {0}, options(true, false)), std::invalid_argument);
}

TEST(Advantages, TensorOfGroupsMatchesThePerGroupFunction) {
  const torch::Tensor rewards =
      torch::tensor({1.f, 0.f, 0.f, 1.f, 0.5f, 0.5f, 0.5f, 0.5f}).reshape({2, 4});
  const torch::Tensor a = grpo_advantages(rewards, options(true, false));
  EXPECT_EQ(a.sizes(), rewards.sizes());
  EXPECT_EQ(a.scalar_type(), torch::kFloat);
  const double want = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  EXPECT_NEAR(a[0][0].item<double>(), want, 1e-6);
  EXPECT_NEAR(a[0][1].item<double>(), -want, 1e-6);
  EXPECT_TRUE(torch::equal(a[1], torch::zeros({4})));
  const torch::Tensor one =
      grpo_advantages(torch::tensor({0.0, 1.0}, torch::kDouble), options(false, true));
  EXPECT_TRUE(torch::equal(one, torch::tensor({-1.0, 1.0}, torch::kDouble)));
}

}  // namespace
}  // namespace streamrl::rl
