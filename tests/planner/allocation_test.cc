#include "streamrl/planner/allocation.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

TEST(Algorithm1, BalancesHandMadeCurves) {
  // max(100/x, 50/y) over x + y <= 12 is smallest at x = 8, y = 4 (both 12.5 s).
  auto gen = [](int x) { return 100.0 / x; };
  auto train = [](int y) { return 50.0 / y; };
  Allocation a = allocate_single(12, 1, 1, gen, train);
  EXPECT_EQ(a.gen, 8);
  EXPECT_EQ(a.train, 4);
  EXPECT_DOUBLE_EQ(a.iteration_seconds(), 12.5);
}

TEST(Algorithm1, RespectsUnitsAndPrefersFewerDevices) {
  // Training stops improving beyond 4 devices: the best split leaves devices unused rather than
  // giving the trainer more for nothing.
  auto gen = [](int x) { return 64.0 / x; };
  auto train = [](int y) { return y >= 4 ? 4.0 : 16.0 / y; };
  Allocation a = allocate_single(24, 4, 4, gen, train);
  EXPECT_EQ(a.gen % 4, 0);
  EXPECT_EQ(a.gen, 16);
  EXPECT_EQ(a.train, 4);
  EXPECT_DOUBLE_EQ(a.iteration_seconds(), 4.0);
  EXPECT_THROW(allocate_single(4, 4, 4, gen, train), InputError);
}

TEST(Algorithm1, CrossDatacenterShrinksTheFasterSide) {
  // Generation on 32 devices takes 2 s, training on 8 takes 8 s: generation shrinks to the count
  // closest to 8 s, i.e. 8 devices (64/8 = 8), training keeps its 8.
  auto gen = [](int x) { return 64.0 / x; };
  auto train = [](int y) { return 64.0 / y; };
  Allocation a = allocate_cross(32, 8, 4, 4, gen, train);
  EXPECT_EQ(a.gen, 8);
  EXPECT_EQ(a.train, 8);
  // The other way round: training is faster and shrinks; generation keeps its budget.
  Allocation b = allocate_cross(8, 32, 4, 4, gen, train);
  EXPECT_EQ(b.gen, 8);
  EXPECT_EQ(b.train, 8);
  // Shrinking never goes below one unit or above the budget.
  Allocation c = allocate_cross(
      32, 8, 4, 4, [](int x) { return 1.0; }, train);
  EXPECT_GE(c.gen, 4);
  EXPECT_LE(c.gen, 32);
}

TEST(Elastic, TriggersWhereDeltaReachesTheUnitGain) {
  // T_gen = (8 + 2i) * 8 / x, T_train = 8. From x = 8: delta = 2i, gain = 4 + i, so the first
  // scale-out is at i = 4. From x = 16: delta = i - 4, gain = (8 + 2i) / 6: next at i = 8.
  auto gen = [](int i, int x) { return (8.0 + 2 * i) * 8 / x; };
  auto train = [](int, int) { return 8.0; };
  auto steps = elastic_schedule(10, 8, 8, 8, 64, gen, train);
  ASSERT_EQ(steps.size(), 10u);
  std::vector<int> triggers;
  for (const auto& s : steps) {
    if (s.scale_out) triggers.push_back(s.iteration);
  }
  EXPECT_EQ(triggers, (std::vector<int>{4, 8}));
  EXPECT_EQ(steps[3].gen, 8);
  EXPECT_EQ(steps[5].gen, 16);
  EXPECT_EQ(steps[9].gen, 24);
  EXPECT_DOUBLE_EQ(steps[4].delta, 8.0);
  EXPECT_DOUBLE_EQ(steps[4].gain, 8.0);
  EXPECT_DOUBLE_EQ(steps[4].delta_after, 0.0);
  // A cap on the SGS stops growth.
  auto capped = elastic_schedule(10, 8, 8, 8, 16, gen, train);
  EXPECT_EQ(capped.back().gen, 16);
}

TEST(Elastic, IgnoresUnitsThatBarelyHelp) {
  // Generation bound by the long tail: 100 s however many devices, plus a sliver that shrinks.
  auto gen = [](int, int x) { return 100.0 + 8.0 / x; };
  auto train = [](int, int) { return 50.0; };
  auto plain = elastic_schedule(3, 8, 8, 8, 64, gen, train);
  EXPECT_TRUE(plain[0].scale_out);  // the paper's rule adds a node for a 0.5 s gain
  auto guarded = elastic_schedule(3, 8, 8, 8, 64, gen, train, 0.02);
  for (const auto& s : guarded) EXPECT_FALSE(s.scale_out);
}

TEST(Elastic, NeverScalesWhenGenerationIsFaster) {
  auto steps = elastic_schedule(
      5, 8, 8, 8, 64, [](int, int x) { return 16.0 / x; }, [](int, int) { return 10.0; });
  for (const auto& s : steps) EXPECT_FALSE(s.scale_out);
}

}  // namespace
}  // namespace streamrl::planner
