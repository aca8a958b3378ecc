#include "streamrl/planner/pipeline_step_calibration.h"

#include <algorithm>
#include <cmath>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

double busy_share(const PipelineEmulation& e) { return std::clamp(1.0 - e.bubble_ratio, 0.0, 1.0); }

}  // namespace

void PipelineStepCalibration::add(const PipelineEmulation& emulated, double measured_step_s) {
  if (!(std::isfinite(measured_step_s) && measured_step_s > 0 && std::isfinite(emulated.step_s) &&
        emulated.step_s > 0)) {
    return;
  }
  const double x = busy_share(emulated), y = measured_step_s / emulated.step_s;
  sums_[0] += 1, sums_[1] += x, sums_[2] += y, sums_[3] += x * x, sums_[4] += x * y;
}

void PipelineStepCalibration::decay(double keep) {
  if (!(keep >= 0 && keep <= 1)) throw InputError("step calibration: decay must be in [0, 1]");
  for (double& s : sums_) s *= keep;
}

double PipelineStepCalibration::factor(const PipelineEmulation& e) const {
  const double n = sums_[0];
  if (n <= 0) return 1.0;
  const double mean_x = sums_[1] / n, mean_y = sums_[2] / n;
  const double var_x = sums_[3] / n - mean_x * mean_x;
  // Busy shares a point apart or less say nothing about the slope.
  if (var_x < 1e-4) return mean_y;
  const double slope = (sums_[4] / n - mean_x * mean_y) / var_x;
  // Within two standard deviations of the busy shares seen: a line is not trusted far outside.
  const double reach = 2 * std::sqrt(var_x);
  const double x = std::clamp(busy_share(e), mean_x - reach, mean_x + reach);
  const double f = mean_y + slope * (x - mean_x);
  return f > 0 ? f : mean_y;
}

}  // namespace streamrl::planner
