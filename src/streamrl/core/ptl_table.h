// PTL(BS, context): the decode step time of one generation instance, as `streamrl profile`
// measures it (engine::Profile) and as the dispatcher's latency models and the planner read it.
#pragma once

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace streamrl::core {

class PtlTable {
 public:
  struct Point {
    int batch_size = 0;
    int context = 0;  // cached tokens per sequence
    double step_seconds = 0;
  };
  // InputError on no points or a bad one.
  static PtlTable from_points(const std::vector<Point>& points, double prefill_tokens_per_s = 0,
                              int threads = 0);
  // engine::Profile's JSON: {"ptl": [{batch_size, context, step_seconds}], "prefill_tokens_per_s",
  // "threads"}. InputError on a malformed table.
  static PtlTable from_json(const nlohmann::json& j);

  // Linear in batch size within a measured context (extrapolated above the largest batch), then
  // linear in context between the two nearest measured ones (clamped below the smallest,
  // extrapolated linearly above the largest: attention is linear in it).
  double step_seconds(double batch, double context) const;
  double prefill_tokens_per_s() const { return prefill_tokens_per_s_; }
  int threads() const { return threads_; }
  int max_batch() const;  // largest measured batch size

 private:
  double at_context(size_t context_index, double batch) const;
  std::vector<int> contexts_;                                   // ascending
  std::vector<std::vector<std::pair<double, double>>> curves_;  // per context: (batch, seconds)
  double prefill_tokens_per_s_ = 0;
  int threads_ = 0;
};

}  // namespace streamrl::core
