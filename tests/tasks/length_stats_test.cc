// Percentiles, ranks, Spearman and recall against hand-computed values.
#include "streamrl/tasks/length_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace streamrl::tasks {
namespace {

using V = std::vector<double>;

TEST(Percentile, InterpolatesLinearlyBetweenClosestRanks) {
  const V x = {4, 1, 3, 2};  // sorted 1 2 3 4, h = 3q
  EXPECT_DOUBLE_EQ(percentile(x, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(x, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile(x, 0.9), 3.7);
  EXPECT_DOUBLE_EQ(percentile(x, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile(V{7}, 0.99), 7.0);
  EXPECT_THROW(percentile(V{}, 0.5), std::invalid_argument);
  EXPECT_THROW(percentile(x, 1.5), std::invalid_argument);
}

TEST(Summarize, HandComputedSummary) {
  const LengthSummary s = summarize(V{100, 10, 40, 20, 30});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 40.0);
  EXPECT_DOUBLE_EQ(s.p50, 30.0);
  EXPECT_DOUBLE_EQ(s.p90, 76.0);  // h = 3.6: 40 + 0.6 * 60
  EXPECT_DOUBLE_EQ(s.p99, 97.6);  // h = 3.96: 40 + 0.96 * 60
  EXPECT_DOUBLE_EQ(s.max, 100.0);
  EXPECT_THROW(summarize(V{}), std::invalid_argument);
}

TEST(AverageRanks, TiesShareTheMeanRank) {
  EXPECT_EQ(average_ranks(V{10, 20, 20, 5}), (V{2, 3.5, 3.5, 1}));
  EXPECT_EQ(average_ranks(V{3, 3, 3}), (V{2, 2, 2}));
  EXPECT_EQ(average_ranks(V{}), V{});
}

TEST(Spearman, HandExamples) {
  EXPECT_DOUBLE_EQ(spearman(V{1, 2, 3, 4}, V{10, 20, 30, 400}), 1.0);
  EXPECT_DOUBLE_EQ(spearman(V{1, 2, 3, 4}, V{4, 3, 2, 1}), -1.0);
  // No ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) with d = (-1, 1, -1, 1, 0): 1 - 24 / 120.
  EXPECT_NEAR(spearman(V{1, 2, 3, 4, 5}, V{2, 1, 4, 3, 5}), 0.8, 1e-12);
  // Ties: ranks (1, 2.5, 2.5, 4) and (1, 2, 3, 4); centred products 4.5, squares 4.5 and 5.
  EXPECT_NEAR(spearman(V{1, 2, 2, 3}, V{1, 2, 3, 4}), 4.5 / std::sqrt(4.5 * 5.0), 1e-12);
}

TEST(Spearman, UndefinedCasesAreZeroAndMismatchThrows) {
  EXPECT_EQ(spearman(V{1, 1, 1}, V{1, 2, 3}), 0.0);
  EXPECT_EQ(spearman(V{5}, V{6}), 0.0);
  EXPECT_EQ(spearman(V{}, V{}), 0.0);
  EXPECT_THROW(spearman(V{1, 2}, V{1}), std::invalid_argument);
}

TEST(TopFractionRecall, CountsTrulyLongestFoundAmongPredictedLongest) {
  const V actual = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(top_fraction_recall(actual, actual, 0.2), 1.0);
  const V reversed = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(top_fraction_recall(reversed, actual, 0.2), 0.0);
  // Top 2 truly longest are items 9 and 8; predicted top 2 are items 9 and 0.
  const V half = {50, 0, 0, 0, 0, 0, 0, 0, 0, 99};
  EXPECT_DOUBLE_EQ(top_fraction_recall(half, actual, 0.2), 0.5);
  EXPECT_DOUBLE_EQ(top_fraction_recall(reversed, actual, 1.0), 1.0);
}

TEST(TopFractionRecall, SetSizeRoundsUpAndTiesBreakByIndex) {
  V actual(30, 0.0);
  for (int i = 0; i < 30; ++i) actual[i] = i;
  // 10% of 30 is exactly 3 items (not 4 from floating-point noise): items 29, 28, 27.
  V predicted(30, 0.0);
  predicted[29] = predicted[28] = predicted[27] = 1.0;
  EXPECT_DOUBLE_EQ(top_fraction_recall(predicted, actual, 0.1), 1.0);
  // 5% of 30 is 1.5 items, rounded up to 2.
  V one(30, 0.0);
  one[29] = 1.0;
  EXPECT_DOUBLE_EQ(top_fraction_recall(one, actual, 0.05), 0.5);
  // All predictions tied: the lowest indices are taken, none of which are longest.
  EXPECT_DOUBLE_EQ(top_fraction_recall(V(30, 1.0), actual, 0.1), 0.0);
}

TEST(TopFractionRecall, RejectsBadArguments) {
  EXPECT_THROW(top_fraction_recall(V{1}, V{1, 2}, 0.5), std::invalid_argument);
  EXPECT_THROW(top_fraction_recall(V{}, V{}, 0.5), std::invalid_argument);
  EXPECT_THROW(top_fraction_recall(V{1}, V{1}, 0.0), std::invalid_argument);
  EXPECT_THROW(top_fraction_recall(V{1}, V{1}, 1.5), std::invalid_argument);
}

}  // namespace
}  // namespace streamrl::tasks
