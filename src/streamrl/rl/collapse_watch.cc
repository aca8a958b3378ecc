#include "streamrl/rl/collapse_watch.h"

#include <cstdio>

namespace streamrl::rl {

void CollapseWatch::observe_iteration(double reward_mean, double mean_length) {
  rewards_.push_back(reward_mean);
  lengths_.push_back(mean_length);
}

void CollapseWatch::observe_eval(double accuracy) { evals_.push_back(accuracy); }

double CollapseWatch::mean(const std::vector<double>& v, size_t from, size_t to) const {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : 0.0;
}

std::optional<std::string> CollapseWatch::check() {
  const size_t w = static_cast<size_t>(o_.window);
  const size_t n = rewards_.size();
  if (w == 0 || n < 2 * w) return std::nullopt;  // start and end windows must not overlap
  const double reward0 = mean(rewards_, 0, w), reward1 = mean(rewards_, n - w, n);
  if (reward1 - reward0 < o_.reward_rise) return std::nullopt;
  char buf[256];
  std::optional<std::string> out;
  if (!eval_flagged_ && evals_.size() >= 2 && evals_.front() - evals_.back() >= o_.eval_drop) {
    eval_flagged_ = true;
    std::snprintf(buf, sizeof(buf),
                  "reward rose %.3f -> %.3f while held-out accuracy fell %.3f -> %.3f: the "
                  "reward is not measuring the task (check data.reward and the verifier)",
                  reward0, reward1, evals_.front(), evals_.back());
    out = buf;
  }
  const double len0 = mean(lengths_, 0, w), len1 = mean(lengths_, n - w, n);
  if (!out && !length_flagged_ && len1 < o_.length_ratio * len0) {
    length_flagged_ = true;
    std::snprintf(buf, sizeof(buf),
                  "reward rose %.3f -> %.3f while the mean response length collapsed %.1f -> "
                  "%.1f tokens: the policy may be gaming the reward (check data.reward and the "
                  "verifier)",
                  reward0, reward1, len0, len1);
    out = buf;
  }
  if (out) warnings_.push_back(*out);
  return out;
}

}  // namespace streamrl::rl
