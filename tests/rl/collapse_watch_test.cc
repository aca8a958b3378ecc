// The collapse watch flags a rising reward with a falling held-out score or a collapsing response
// length, once per reason, and stays quiet on a healthy run.
#include <gtest/gtest.h>

#include "streamrl/rl/collapse_watch.h"

namespace streamrl::rl {
namespace {

TEST(CollapseWatch, HealthyRunIsNotFlagged) {
  CollapseWatch w;
  w.observe_eval(0.30);
  for (int i = 0; i < 20; ++i) {
    w.observe_iteration(0.3 + 0.02 * i, 40.0 - 0.5 * i);  // length drifts down a little
    EXPECT_FALSE(w.check().has_value()) << i;
  }
  w.observe_eval(0.45);
  EXPECT_FALSE(w.check().has_value());
  EXPECT_TRUE(w.warnings().empty());
}

TEST(CollapseWatch, RewardUpLengthToOneTokenIsFlaggedOnce) {
  CollapseWatch w;
  int flagged = 0;
  for (int i = 0; i < 20; ++i) {
    const bool collapsed = i >= 6;
    w.observe_iteration(collapsed ? 1.0 : 0.1, collapsed ? 1.0 : 35.0);
    if (auto m = w.check()) {
      ++flagged;
      EXPECT_NE(m->find("length collapsed"), std::string::npos) << *m;
    }
  }
  EXPECT_EQ(flagged, 1);
  EXPECT_EQ(w.warnings().size(), 1u);
}

TEST(CollapseWatch, RewardUpHeldOutDownIsFlagged) {
  CollapseWatch w;
  w.observe_eval(0.30);
  for (int i = 0; i < 10; ++i) w.observe_iteration(0.2 + 0.05 * i, 30.0);
  EXPECT_FALSE(w.check().has_value());  // no later evaluation yet
  w.observe_eval(0.20);
  auto m = w.check();
  ASSERT_TRUE(m.has_value());
  EXPECT_NE(m->find("held-out accuracy fell 0.300 -> 0.200"), std::string::npos) << *m;
  EXPECT_FALSE(w.check().has_value());  // reported once
}

TEST(CollapseWatch, FallingRewardIsNotACollapse) {
  CollapseWatch w;
  w.observe_eval(0.30);
  for (int i = 0; i < 10; ++i) w.observe_iteration(0.5 - 0.04 * i, 30.0 - 2.5 * i);
  w.observe_eval(0.10);
  EXPECT_FALSE(w.check().has_value());
}

}  // namespace
}  // namespace streamrl::rl
