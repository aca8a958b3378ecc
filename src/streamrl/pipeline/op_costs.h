// What each pipeline op costs, in seconds and bytes: the common input of the dynamic planner
// (which times ops while it orders them) and the planner's emulator (which times a finished
// schedule). planner::pipeline_op_costs fills it from a measured profile.
#pragma once

#include <cstddef>
#include <vector>

#include "streamrl/pipeline/schedule.h"

namespace streamrl::pipeline {

struct OpCosts {
  int stages = 1, chunks = 1, micro_batches = 0;
  // [stages * chunks * micro_batches], index (stage * chunks + chunk) * micro_batches + mb.
  std::vector<double> forward_s, backward_s;
  // Bytes of activations an op's forward keeps until its backward ends (same index).
  std::vector<double> activation_bytes;
  // [micro_batches] seconds to send one activation or gradient of the micro-batch to another
  // stage (latency + bytes / bandwidth); consecutive virtual stages on one stage send nothing.
  std::vector<double> transfer_s;

  int index(int stage, int chunk, int mb) const {
    return (stage * chunks + chunk) * micro_batches + mb;
  }
  double forward(int stage, int chunk, int mb) const { return forward_s[index(stage, chunk, mb)]; }
  double backward(int stage, int chunk, int mb) const {
    return backward_s[index(stage, chunk, mb)];
  }
  double activation(int stage, int chunk, int mb) const {
    return activation_bytes[index(stage, chunk, mb)];
  }
  // Zero-cost tables of the right sizes, for callers that fill them in.
  static OpCosts zeros(int stages, int chunks, int micro_batches) {
    const size_t n = static_cast<size_t>(stages) * chunks * micro_batches;
    OpCosts c;
    c.stages = stages, c.chunks = chunks, c.micro_batches = micro_batches;
    c.forward_s.assign(n, 0), c.backward_s.assign(n, 0), c.activation_bytes.assign(n, 0);
    c.transfer_s.assign(micro_batches, 0);
    return c;
  }
};

// One op as an executor ran it: `stage` ran `op` for `seconds` of compute (waits excluded).
struct OpSeconds {
  int stage = 0;
  Op op;
  double seconds = 0;
};

// [stages] the most activation bytes each stage holds at once running its list in `schedule`:
// ops on a stage run one at a time, so list order is time order, and a forward's activations
// are held from its start to its backward's end. Sizes are not checked.
std::vector<double> peak_activation_bytes(const Schedule& schedule, const OpCosts& costs);

}  // namespace streamrl::pipeline
