#include "streamrl/pipeline/micro_batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"

namespace streamrl::pipeline {
namespace {

// Every sample in exactly one micro-batch, and each micro-batch's sums recomputed from lengths.
void expect_exact_cover(const std::vector<MicroBatch>& mbs, const std::vector<int64_t>& lengths,
                        const TokenCost& cost) {
  std::vector<int> seen(lengths.size(), 0);
  for (const MicroBatch& mb : mbs) {
    int64_t tokens = 0, tokens_sq = 0;
    double c = 0;
    for (int i : mb.samples) {
      ++seen.at(i);
      tokens += lengths[i], tokens_sq += lengths[i] * lengths[i], c += cost.of(lengths[i]);
    }
    EXPECT_EQ(mb.tokens, tokens);
    EXPECT_EQ(mb.tokens_sq, tokens_sq);
    EXPECT_NEAR(mb.cost, c, 1e-9 * c);
    EXPECT_TRUE(std::is_sorted(mb.samples.begin(), mb.samples.end()));
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
}

// The oracle: the best makespan over all m^n assignments.
double optimal_max_cost(const std::vector<double>& costs, int bins) {
  const int n = static_cast<int>(costs.size());
  int64_t combos = 1;
  for (int i = 0; i < n; ++i) combos *= bins;
  double best = 1e300;
  for (int64_t code = 0; code < combos; ++code) {
    std::vector<double> load(bins, 0);
    for (int64_t i = 0, x = code; i < n; ++i, x /= bins) load[x % bins] += costs[i];
    best = std::min(best, *std::max_element(load.begin(), load.end()));
  }
  return best;
}

double max_cost(const std::vector<MicroBatch>& mbs) {
  double m = 0;
  for (const MicroBatch& mb : mbs) m = std::max(m, mb.cost);
  return m;
}

TEST(SplitBalanced, WithinGrahamsLptBoundOfTheOptimum) {
  std::mt19937_64 rng(11);
  const TokenCost cost{1.0, 1e-3};
  for (int trial = 0; trial < 150; ++trial) {
    const std::vector<int64_t> lengths = test_inputs::long_tailed_lengths(rng, 4 + trial % 6);
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    SplitOptions o{cost, total / (2 + trial % 2) + 1, 0};
    const std::vector<MicroBatch> mbs = split_balanced(lengths, o);
    expect_exact_cover(mbs, lengths, cost);
    const int m = static_cast<int>(mbs.size());
    ASSERT_EQ(m, 2 + trial % 2);
    std::vector<double> costs;
    for (int64_t l : lengths) costs.push_back(cost.of(l));
    const double opt = optimal_max_cost(costs, m);
    EXPECT_LE(max_cost(mbs), (4.0 / 3 - 1.0 / (3 * m)) * opt * (1 + 1e-12)) << "trial " << trial;
  }
}

TEST(SplitBalanced, SpreadIsAtMostOneSequenceOnLargeBatches) {
  // Each sequence joins the cheapest bin, so no bin exceeds another by more than its last
  // (smallest) sequence; with the quadratic term it is cost, not tokens, that evens out.
  std::mt19937_64 rng(12);
  const TokenCost cost{1.0, 2e-3};
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<int64_t> lengths = test_inputs::long_tailed_lengths(rng, 64 + trial);
    const std::vector<MicroBatch> mbs = split_balanced(lengths, {cost, 4096, 0});
    expect_exact_cover(mbs, lengths, cost);
    int64_t total = 0;
    double longest = 0;
    for (int64_t l : lengths) total += l, longest = std::max(longest, cost.of(l));
    EXPECT_EQ(static_cast<int64_t>(mbs.size()),
              std::min<int64_t>((total + 4095) / 4096, static_cast<int64_t>(lengths.size())));
    double lo = 1e300;
    for (const MicroBatch& mb : mbs) lo = std::min(lo, mb.cost);
    EXPECT_LE(max_cost(mbs) - lo, longest + 1e-9);
    EXPECT_TRUE(
        std::is_sorted(mbs.begin(), mbs.end(),
                       [](const MicroBatch& a, const MicroBatch& b) { return a.cost > b.cost; }));
  }
}

TEST(SplitBalanced, RespectsTheActivationCap) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<int64_t> lengths = test_inputs::long_tailed_lengths(rng, 48);
    const int64_t cap = 2048;
    const std::vector<MicroBatch> mbs = split_balanced(lengths, {{1.0, 1e-3}, 1 << 20, cap});
    expect_exact_cover(mbs, lengths, {1.0, 1e-3});
    for (const MicroBatch& mb : mbs) {
      // Over the cap only as a sequence alone in its micro-batch.
      if (mb.tokens > cap) EXPECT_EQ(mb.samples.size(), 1u);
    }
  }
}

TEST(SplitBalanced, RoundsTheBinCountUpToAMultiple) {
  const std::vector<int64_t> lengths = {50, 40, 30, 20, 10, 10, 10, 10, 5, 5};
  EXPECT_EQ(split_balanced(lengths, {{}, 1000, 0, 1}).size(), 1u);
  EXPECT_EQ(split_balanced(lengths, {{}, 1000, 0, 4}).size(), 4u);
  EXPECT_EQ(split_balanced(lengths, {{}, 40, 0, 4}).size(), 8u);  // ceil(190 / 40) = 5 -> 8
  EXPECT_EQ(split_balanced({7, 8, 9}, {{}, 1000, 0, 4}).size(), 3u);
  EXPECT_THROW(split_balanced(lengths, {{}, 1000, 0, 0}), InputError);
}

// Two micro-batches per level of the ramp (sizes target / 4, then target / 2) from the shortest
// sequences, after the balanced rest.
TEST(SplitTapered, RampOfTheShortestSequencesAfterTheBalancedRest) {
  const std::vector<int64_t> lengths = {100, 10, 20, 30, 40, 500, 600};
  const std::vector<MicroBatch> mbs = split_tapered(lengths, {{}, 160, 0, 1}, 2);
  expect_exact_cover(mbs, lengths, {});
  std::vector<std::vector<int>> samples;
  for (const MicroBatch& mb : mbs) samples.push_back(mb.samples);
  // {10, 20} and {30} within 40; {40} and {100} (alone, over 80) for the next level.
  EXPECT_EQ(samples, (std::vector<std::vector<int>>{{6}, {5}, {0}, {4}, {1, 2}, {3}}));
  // No levels: split_balanced alone. A ramp that runs out of sequences ends early.
  EXPECT_EQ(split_tapered(lengths, {{}, 160, 0, 1}, 0).size(),
            split_balanced(lengths, {{}, 160, 0, 1}).size());
  const std::vector<MicroBatch> two = split_tapered({5, 6}, {{}, 160, 0, 1}, 3);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].samples, (std::vector<int>{0, 1}));
  EXPECT_THROW(split_tapered(lengths, {{}, 160, 0, 1}, -1), InputError);
}

TEST(SplitTapered, EveryEndWithinItsLevelAndNoLongerThanTheRest) {
  std::mt19937_64 rng(17);
  const TokenCost cost{1.0, 1e-3};
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<int64_t> lengths = test_inputs::long_tailed_lengths(rng, 64);
    const std::vector<MicroBatch> mbs = split_tapered(lengths, {cost, 4096, 0, 1}, 3);
    expect_exact_cover(mbs, lengths, cost);
    ASSERT_GT(mbs.size(), 6u);
    const std::vector<MicroBatch> ends(mbs.end() - 6, mbs.end());
    int64_t longest_end = 0, shortest_rest = 1 << 30;
    for (const MicroBatch& mb : ends) {
      if (mb.samples.size() > 1) EXPECT_LE(mb.tokens, 4096 / 2);
      for (int i : mb.samples) longest_end = std::max(longest_end, lengths[i]);
    }
    for (size_t m = 0; m + 6 < mbs.size(); ++m) {
      for (int i : mbs[m].samples) shortest_rest = std::min(shortest_rest, lengths[i]);
    }
    EXPECT_LE(longest_end, shortest_rest);
    EXPECT_TRUE(
        std::is_sorted(ends.begin(), ends.end(),
                       [](const MicroBatch& a, const MicroBatch& b) { return a.cost > b.cost; }));
  }
}

TEST(SplitStatic, EqualSampleCountsInArrivalOrder) {
  const std::vector<int64_t> lengths = {5, 1000, 3, 7, 9, 11, 13};
  const std::vector<MicroBatch> mbs = split_static(lengths, 3);
  ASSERT_EQ(mbs.size(), 3u);
  EXPECT_EQ(mbs[0].samples, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(mbs[1].samples, (std::vector<int>{3, 4}));
  EXPECT_EQ(mbs[2].samples, (std::vector<int>{5, 6}));
  EXPECT_EQ(mbs[0].tokens, 1008);
  EXPECT_EQ(split_static(lengths, 20).size(), 7u);
  EXPECT_TRUE(split_static({}, 4).empty());
  EXPECT_TRUE(split_balanced({}, {}).empty());
  EXPECT_THROW(split_static(lengths, 0), InputError);
  EXPECT_THROW(split_balanced({4, -1}, {}), InputError);
  EXPECT_THROW(split_balanced({4}, {{}, 0, 0}), InputError);
}

// A padding executor computes rows x longest: the sorted split keeps lengths together, so its
// padded total is far below the arrival-order split's on a long-tailed batch.
TEST(SplitSorted, KeepsSimilarLengthsTogetherUnderThePaddedTarget) {
  const std::vector<int64_t> lengths = {5, 1000, 3, 7, 9, 11, 13, 800};
  const std::vector<MicroBatch> mbs = split_sorted(lengths, {{}, 1000, 0, 1});
  ASSERT_EQ(mbs.size(), 3u);
  EXPECT_EQ(mbs[0].samples, (std::vector<int>{1}));
  EXPECT_EQ(mbs[1].samples, (std::vector<int>{7}));
  EXPECT_EQ(mbs[2].samples, (std::vector<int>{0, 2, 3, 4, 5, 6}));
  EXPECT_EQ(mbs[2].tokens, 6 * 13);
  EXPECT_EQ(mbs[2].tokens_sq, 6 * 13 * 13);
  int64_t sorted = 0, arrival = 0;
  for (const MicroBatch& mb : mbs) sorted += mb.tokens;
  for (const MicroBatch& mb : split_static(lengths, 3)) arrival += padded(mb, lengths).tokens;
  EXPECT_EQ(sorted, 1000 + 800 + 78);
  EXPECT_EQ(arrival, 3 * 1000 + 3 * 11 + 2 * 800);
  const MicroBatch p = padded(split_static(lengths, 1)[0], lengths, {1, 0.5});
  EXPECT_EQ(p.tokens, 8000);
  EXPECT_DOUBLE_EQ(p.cost, 8 * (1000 + 0.5 * 1000 * 1000));
  EXPECT_THROW(split_sorted(lengths, {{}, 0, 0, 1}), InputError);
  // The grouped static baseline: equal sample counts over the sorted order.
  const std::vector<MicroBatch> grouped = split_static_grouped(lengths, 3);
  ASSERT_EQ(grouped.size(), 3u);
  EXPECT_EQ(grouped[0].samples, (std::vector<int>{1, 6, 7}));
  EXPECT_EQ(grouped[0].tokens, 3 * 1000);
  EXPECT_EQ(grouped[1].samples, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(grouped[2].samples, (std::vector<int>{0, 2}));
  EXPECT_EQ(grouped[2].tokens, 2 * 5);
  EXPECT_TRUE(split_sorted({}, {}).empty());
}

}  // namespace
}  // namespace streamrl::pipeline
