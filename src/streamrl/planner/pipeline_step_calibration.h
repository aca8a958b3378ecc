// The emulated step against the measured one, learnt online. PipelineCostFit gives each op its
// average cost over the steps run, but stages that share a host (cores, memory bandwidth, cache)
// slow each other while both compute, so ops run slower in a schedule with few bubbles than in
// one with many. On 2 cores with one stage per core (bench pipeline), measured / emulated was
// 0.95 for static 1F1B at 70 % busy and 1.17 for the dynamic plan at 91 %: an error that follows
// the schedule, not the load. The calibration fits measured / emulated = a + b * busy, busy being
// the emulated share of stage time spent computing (1 - bubble ratio), over the steps run so far.
#pragma once

#include <array>

#include "streamrl/planner/pipeline_emulator.h"

namespace streamrl::planner {

class PipelineStepCalibration {
 public:
  // One step: its emulation (from the profile as it stood before the step) and its measured
  // wall time. Non-finite or non-positive times are skipped.
  void add(const PipelineEmulation& emulated, double measured_step_s);
  // Multiplies every sum by `keep` in [0, 1] (PipelineCostFit::kKeepPerStep in the trainer).
  void decay(double keep);

  // measured / emulated for a schedule whose emulation is `e`, its busy share held within two
  // standard deviations of the steps seen: 1 before any step; the mean ratio while the steps seen
  // do not differ in busy share (or the line would not be positive).
  double factor(const PipelineEmulation& e) const;
  // The calibrated step time of `e`.
  double step_s(const PipelineEmulation& e) const { return e.step_s * factor(e); }
  // Steps seen (decayed).
  double observations() const { return sums_[0]; }

 private:
  // Weighted sums for least squares of y (ratio) on x (busy): n, x, y, x^2, x*y.
  std::array<double, 5> sums_{};
};

}  // namespace streamrl::planner
