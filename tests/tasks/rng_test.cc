// The portable PRNG: fixed outputs, unbiased ranges and heavy-tail weights.
#include "streamrl/tasks/rng.h"

#include <gtest/gtest.h>

#include <map>

namespace streamrl::tasks {
namespace {

TEST(Rng, MatchesTheSplitmix64ReferenceSequence) {
  // Outputs of the reference splitmix64.c for seed 0: generation is identical on every platform.
  Rng rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

TEST(Rng, UniformCoversExactlyTheRange) {
  Rng rng(7);
  std::map<int64_t, int> counts;
  for (int i = 0; i < 7000; ++i) ++counts[rng.uniform(-3, 3)];
  ASSERT_EQ(counts.size(), 7u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 3);
  for (const auto& [value, count] : counts) EXPECT_NEAR(count, 1000, 150) << value;
  EXPECT_EQ(rng.uniform(5, 5), 5);
  rng.uniform(INT64_MIN, INT64_MAX);  // the full range must not divide by zero
}

TEST(Rng, WeightedFollowsTheWeightsAndNeverDrawsZero) {
  Rng rng(11);
  const std::vector<uint32_t> weights = {1, 0, 3};
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 8000; ++i) ++counts[rng.weighted(weights)];
  EXPECT_EQ(counts[1], 0);
  EXPECT_NEAR(counts[0], 2000, 200);
  EXPECT_NEAR(counts[2], 6000, 200);
}

TEST(Rng, ParetoWeightsDecreaseAndHoldTheTruncatedMass) {
  const std::vector<uint32_t> w = pareto_weights(1.6, 3.0, 2, 30);
  ASSERT_EQ(w.size(), 29u);
  for (size_t i = 1; i < w.size(); ++i) EXPECT_LE(w[i], w[i - 1]);
  EXPECT_GT(w.back(), 0u);
  // P(k = 2) = 1 - (1 + 1/3)^-1.6 = 0.3689...
  EXPECT_NEAR(w[0], 368'900, 1);
  uint64_t total = 0;
  for (uint32_t x : w) total += x;
  // Everything below k = 31: 1 - (1 + 29/3)^-1.6.
  EXPECT_NEAR(total, 977'346, 30);
}

}  // namespace
}  // namespace streamrl::tasks
