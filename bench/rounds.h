// Repeated, interleaved measurement for benchmarks on a shared machine (load drifts): the compared
// variants run A B C A B C ... over several rounds, and every figure is reported as the median and
// spread of its per-round values, with the machine's load beside it. A ratio of two variants is the
// median of the per-round ratios, so drift that hits one round hits both sides of its ratio.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/core/clock.h"

namespace streamrl::bench {

// {"median", "min", "max", "spread" (max/min - 1), "values"} of one figure.
nlohmann::json spread_json(const std::vector<double>& values);

// The 1-minute load average of /proc/loadavg (-1 when unreadable).
double load_average();

class Rounds {
 public:
  // `cores`: the cores the benchmark uses; a round whose load exceeds them is warned about.
  Rounds(std::string bench, int cores) : bench_(std::move(bench)), cores_(cores) {}

  // Opens round `r` (0-based) and records the load at its start.
  void begin_round(int r);
  // One value of `key` in the current round.
  void add(const std::string& key, double value);

  std::vector<double> values(const std::string& key) const;
  double median(const std::string& key) const;
  nlohmann::json summary(const std::string& key) const { return spread_json(values(key)); }
  // Per-round numerator/denominator, summarised (rounds where either is missing are skipped).
  nlohmann::json ratio(const std::string& numerator, const std::string& denominator) const;
  double ratio_median(const std::string& numerator, const std::string& denominator) const;
  // Every key's summary, and the load of each round with the warning count.
  nlohmann::json to_json() const;
  nlohmann::json load_json() const;
  int rounds() const { return static_cast<int>(load_.size()); }

 private:
  std::string bench_;
  int cores_;
  std::vector<double> load_;                             // per round
  std::map<std::string, std::map<int, double>> values_;  // key -> round -> value
};

// `dense` and `sparse` timed alternately: one warm-up call each, then `rounds` rounds of `reps`
// calls each, logged as "dense_s" / "sparse_s" (seconds per call).
template <class Dense, class Sparse>
void time_alternately(Rounds& log, Dense dense, Sparse sparse, int rounds, int reps) {
  auto timed = [reps](auto& fn) {
    const auto t0 = core::Clock::now();
    for (int i = 0; i < reps; ++i) fn();
    return core::seconds_since(t0) / reps;
  };
  dense();  // first-call allocations
  sparse();
  for (int r = 0; r < rounds; ++r) {
    log.begin_round(r);
    log.add("dense_s", timed(dense));
    log.add("sparse_s", timed(sparse));
  }
}

}  // namespace streamrl::bench
