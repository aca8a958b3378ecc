#include "streamrl/pipeline/op_costs.h"

#include <algorithm>

namespace streamrl::pipeline {

std::vector<double> peak_activation_bytes(const Schedule& schedule, const OpCosts& costs) {
  std::vector<double> peak(schedule.stages, 0);
  for (int stage = 0; stage < schedule.stages; ++stage) {
    double held = 0;
    for (const Op& op : schedule.ops[stage]) {
      const double bytes = costs.activation(stage, op.chunk, op.micro_batch);
      held += op.kind == OpKind::kForward ? bytes : -bytes;
      peak[stage] = std::max(peak[stage], held);
    }
  }
  return peak;
}

}  // namespace streamrl::pipeline
