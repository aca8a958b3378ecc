// Flags a run whose training reward rises while what the reward stands for collapses: the
// held-out score falls (the reward is being gamed) or the response length collapses (e.g. a
// policy that learned to emit EOS at once because an empty completion scores). Such a run looks
// healthy on its progress line; the warning goes to the log, metrics.jsonl and the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace streamrl::rl {

struct CollapseWatchOptions {
  int window = 5;             // iterations averaged at the start and at the end
  double reward_rise = 0.05;  // the mean reward rose by at least this much ...
  double eval_drop = 0.05;    // ... while held-out accuracy fell by at least this much
  double length_ratio = 0.5;  // ... or mean response length fell below this share of its start
};

class CollapseWatch {
 public:
  explicit CollapseWatch(CollapseWatchOptions options = {}) : o_(options) {}

  void observe_iteration(double reward_mean, double mean_length);
  void observe_eval(double accuracy);

  // A one-line warning when the run is collapsing and the reason is new since the last call
  // (each of "held-out" and "length" is reported once); nullopt otherwise.
  std::optional<std::string> check();

  // Every warning check() has returned, in order.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  double mean(const std::vector<double>& v, size_t from, size_t to) const;

  CollapseWatchOptions o_;
  std::vector<double> rewards_, lengths_, evals_;
  bool eval_flagged_ = false, length_flagged_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace streamrl::rl
