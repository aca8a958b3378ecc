#include "streamrl/pipeline/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "streamrl/core/errors.h"

namespace streamrl::pipeline {
namespace {

// The oracle: every way to place k-1 cuts among the L-1 gaps.
double brute_force_max_cost(const std::vector<double>& costs, int k) {
  const int n = static_cast<int>(costs.size());
  double best = 1e300;
  std::vector<int> cuts;
  std::function<void(int)> place = [&](int from) {
    if (static_cast<int>(cuts.size()) == k - 1) {
      double worst = 0, sum = 0;
      size_t next = 0;
      for (int l = 0; l < n; ++l) {
        if (next < cuts.size() && cuts[next] == l) worst = std::max(worst, sum), sum = 0, ++next;
        sum += costs[l];
      }
      best = std::min(best, std::max(worst, sum));
      return;
    }
    for (int c = from; c < n; ++c) {
      cuts.push_back(c);
      place(c + 1);
      cuts.pop_back();
    }
  };
  place(1);
  return best;
}

TEST(Partition, MatchesBruteForceOnSmallModels) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int stages = 1 + static_cast<int>(rng() % 3), chunks = 1 + static_cast<int>(rng() % 2);
    const int layers = stages * chunks + static_cast<int>(rng() % 6);
    std::vector<double> costs(layers);
    for (double& c : costs) c = cost(rng);
    if (trial % 5 == 0) costs[rng() % layers] *= 8;  // an LM head or vision tower
    const Partition p = partition_layers(costs, stages, chunks);
    ASSERT_EQ(p.boundaries.size(), static_cast<size_t>(stages * chunks + 1));
    EXPECT_EQ(p.boundaries.front(), 0);
    EXPECT_EQ(p.boundaries.back(), layers);
    for (size_t v = 0; v + 1 < p.boundaries.size(); ++v) {
      EXPECT_LT(p.boundaries[v], p.boundaries[v + 1]) << "empty chunk " << v;
    }
    const std::vector<double> vc = p.virtual_stage_costs(costs);
    EXPECT_NEAR(*std::max_element(vc.begin(), vc.end()),
                brute_force_max_cost(costs, stages * chunks), 1e-9)
        << "trial " << trial;
  }
}

TEST(Partition, BalancesCostNotLayerCount) {
  // Seven light layers and a head five times as heavy: equal counts put 8 on the last stage.
  const std::vector<double> costs = {1, 1, 1, 1, 1, 1, 1, 5};
  EXPECT_EQ(partition_by_count(8, 2).boundaries, (std::vector<int>{0, 4, 8}));
  const Partition p = partition_layers(costs, 2);
  EXPECT_EQ(p.boundaries, (std::vector<int>{0, 6, 8}));
  EXPECT_EQ(p.virtual_stage_costs(costs), (std::vector<double>{6, 6}));
}

TEST(Partition, ChunksAreInterleavedOverStages) {
  // Virtual stage v = chunk * P + stage holds the v-th range in model order.
  const Partition p = partition_by_count(10, 2, 2);  // ranges 3, 3, 2, 2
  EXPECT_EQ(p.boundaries, (std::vector<int>{0, 3, 6, 8, 10}));
  EXPECT_EQ(p.first_layer(0, 0), 0);
  EXPECT_EQ(p.first_layer(1, 0), 3);
  EXPECT_EQ(p.first_layer(0, 1), 6);
  EXPECT_EQ(p.end_layer(1, 1), 10);
}

TEST(Partition, RejectsTooFewLayersAndBadCosts) {
  EXPECT_THROW(partition_layers({1, 1, 1}, 2, 2), InputError);
  EXPECT_THROW(partition_layers({1, -1, 1}, 2), InputError);
  EXPECT_THROW(partition_by_count(3, 4), InputError);
}

}  // namespace
}  // namespace streamrl::pipeline
