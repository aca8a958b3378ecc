// Per-token latency PTL(BS): the time of one decode step (one token for each of BS sequences) as a
// function of the batch size, at a few context lengths, plus prefill throughput. This table feeds
// skew-aware dispatch (StreamRL Eq. 2) and the planner.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "streamrl/core/ptl_table.h"
#include "streamrl/model/transformer.h"

namespace streamrl::engine {

struct ProfileConfig {
  std::vector<int> batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> contexts = {64, 256, 512};  // cached tokens per sequence when decoding
  int steps = 8;                               // decode steps timed per point (median reported)
  int prefill_batch = 16, prefill_len = 128;
};

struct PtlPoint {
  int batch_size = 0;
  int context = 0;
  double step_seconds = 0;  // median decode step, including sampling
  double tokens_per_s() const { return batch_size / step_seconds; }
};

struct Profile {
  std::vector<PtlPoint> ptl;
  double prefill_tokens_per_s = 0;
  int threads = 0;

  // PTL at `batch_size` and `context`, interpolated as core::PtlTable does. Each call builds
  // the table: in loops, build it once with table().
  double step_seconds(double batch_size, int context) const;
  core::PtlTable table() const;  // InputError when empty or malformed

  nlohmann::json to_json() const;
  static Profile from_json(const nlohmann::json& j);  // InputError on a malformed table
};

// Measures the model with the calling thread's core budget. Contexts beyond the model's positions
// are skipped.
Profile measure_profile(model::CausalLM& model, const ProfileConfig& config);

}  // namespace streamrl::engine
