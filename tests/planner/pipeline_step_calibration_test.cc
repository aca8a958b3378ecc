#include "streamrl/planner/pipeline_step_calibration.h"

#include <gtest/gtest.h>

#include <limits>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

PipelineEmulation emulation(double step_s, double busy) {
  PipelineEmulation e;
  e.step_s = step_s;
  e.bubble_ratio = 1 - busy;
  return e;
}

TEST(PipelineStepCalibration, LearnsTheRatioAsALineInTheBusyShare) {
  PipelineStepCalibration c;
  EXPECT_EQ(c.factor(emulation(1, 0.7)), 1.0);  // nothing seen yet
  // measured / emulated = 0.5 + 0.75 * busy, as stages that slow each other give.
  for (double busy : {0.6, 0.8, 0.9}) c.add(emulation(2.0, busy), 2.0 * (0.5 + 0.75 * busy));
  EXPECT_NEAR(c.factor(emulation(3.0, 0.7)), 1.025, 1e-12);
  EXPECT_NEAR(c.step_s(emulation(3.0, 0.7)), 3.075, 1e-12);
  EXPECT_NEAR(c.observations(), 3.0, 1e-12);
  // Far outside what was seen, the line is held at two standard deviations of the busy shares.
  EXPECT_LT(c.factor(emulation(1, 0.0)), c.factor(emulation(1, 0.6)));
  EXPECT_GT(c.factor(emulation(1, 0.0)), 0.5);
}

TEST(PipelineStepCalibration, OneBusyShareGivesTheMeanRatio) {
  PipelineStepCalibration c;
  c.add(emulation(1.0, 0.7), 1.1);
  c.add(emulation(2.0, 0.7), 2.6);
  EXPECT_NEAR(c.factor(emulation(1, 0.2)), 1.2, 1e-12);
  EXPECT_NEAR(c.factor(emulation(1, 0.95)), 1.2, 1e-12);
}

TEST(PipelineStepCalibration, DecayForgetsAndBadStepsAreSkipped) {
  PipelineStepCalibration c;
  c.add(emulation(1.0, 0.5), 2.0);
  c.add(emulation(1.0, 0.5), std::numeric_limits<double>::quiet_NaN());
  c.add(emulation(0.0, 0.5), 1.0);
  c.add(emulation(1.0, 0.5), -1.0);
  EXPECT_NEAR(c.observations(), 1.0, 1e-12);
  c.decay(0.5);
  c.add(emulation(1.0, 0.5), 1.0);  // now weighs twice the decayed step
  EXPECT_NEAR(c.factor(emulation(1, 0.5)), (0.5 * 2.0 + 1.0) / 1.5, 1e-12);
  c.decay(0);
  EXPECT_EQ(c.factor(emulation(1, 0.5)), 1.0);
  EXPECT_THROW(c.decay(1.5), InputError);
}

}  // namespace
}  // namespace streamrl::planner
