#include "streamrl/planner/workload.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::planner {

LengthDistribution LengthDistribution::codemath(int max_output) {
  if (max_output < 16) throw InputError("max_output must be at least 16");
  LengthDistribution d;
  const int bins = 200;
  for (int i = 0; i < bins; ++i) {
    const double x = (i + 0.5) / bins;  // fraction of max_output
    // Rise to the mode at 10% of the maximum, exponential decay, then a flat tail from about half
    // of the maximum; the last bin also holds the samples truncated at the limit.
    double w = x < 0.1 ? x / 0.1 : std::exp(-(x - 0.1) / 0.12) + 0.04;
    if (i == bins - 1) w += 0.6;
    d.values_.push_back(std::max(1.0, std::round(x * max_output)));
    d.weights_.push_back(w);
  }
  d.values_.back() = max_output;
  const double total = std::accumulate(d.weights_.begin(), d.weights_.end(), 0.0);
  for (double& w : d.weights_) w /= total;
  return d;
}

LengthDistribution LengthDistribution::empirical(const std::vector<int>& lengths) {
  if (lengths.empty()) throw InputError("empirical length distribution needs lengths");
  std::vector<int> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  LengthDistribution d;
  for (int v : sorted) {
    if (v <= 0) throw InputError("output lengths must be positive");
    if (!d.values_.empty() && d.values_.back() == v) {
      d.weights_.back() += 1;
    } else {
      d.values_.push_back(v);
      d.weights_.push_back(1);
    }
  }
  for (double& w : d.weights_) w /= sorted.size();
  return d;
}

int LengthDistribution::draw(std::mt19937_64& rng) const {
  std::discrete_distribution<size_t> pick(weights_.begin(), weights_.end());
  return static_cast<int>(values_[pick(rng)]);
}

double LengthDistribution::mean() const {
  double m = 0;
  for (size_t i = 0; i < values_.size(); ++i) m += values_[i] * weights_[i];
  return m;
}

double LengthDistribution::quantile(double q) const {
  double acc = 0;
  for (size_t i = 0; i < values_.size(); ++i) {
    acc += weights_[i];
    if (acc >= q - 1e-12) return values_[i];
  }
  return values_.back();
}

int64_t Batch::total_tokens() const {
  int64_t t = 0;
  for (int s = 0; s < samples(); ++s) t += output_tokens[s] + prompt_tokens[s / group_size];
  return t;
}

void Batch::check() const {
  if (group_size < 1) throw InputError("group_size must be >= 1");
  if (prompt_tokens.empty()) throw InputError("a batch needs at least one group");
  if (output_tokens.size() != prompt_tokens.size() * group_size ||
      estimate.size() != prompt_tokens.size()) {
    throw InputError("batch sizes disagree: groups x group_size != samples");
  }
  if (!skipped.empty() && skipped.size() != prompt_tokens.size()) {
    throw InputError("batch sizes disagree: skipped flags != groups");
  }
  for (int v : output_tokens) {
    if (v <= 0) throw InputError("output lengths must be positive");
  }
  for (int v : prompt_tokens) {
    if (v < 0) throw InputError("prompt lengths must be non-negative");
  }
  if (released_after.empty()) return;
  if (released_after.size() != prompt_tokens.size()) {
    throw InputError("batch sizes disagree: released_after != groups");
  }
  for (int g = 0; g < groups(); ++g) {
    const int p = released_after[g];
    if (p < -1 || p >= groups() || p == g) {
      throw InputError("released_after[" + std::to_string(g) + "] = " + std::to_string(p) +
                       " is not -1 or another group");
    }
  }
  for (int g = 0; g < groups(); ++g) wave(g);  // throws on a cycle
}

int Batch::wave(int group) const {
  int w = 0;
  for (int g = group; !released_after.empty() && released_after[g] >= 0; g = released_after[g]) {
    if (++w > groups())
      throw InputError("released_after has a cycle through group " + std::to_string(group));
  }
  return w;
}

Batch draw_batch(const LengthDistribution& dist, const BatchSpec& spec, uint64_t seed) {
  if (spec.groups < 1 || spec.group_size < 1) throw InputError("batch needs groups >= 1");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::exponential_distribution<double> prompt(1.0 / std::max(1.0, spec.prompt_mean));
  Batch b;
  b.group_size = spec.group_size;
  for (int g = 0; g < spec.groups; ++g) {
    const int base = dist.draw(rng);
    b.prompt_tokens.push_back(std::max(1, static_cast<int>(std::lround(prompt(rng)))));
    double sum = 0;
    for (int i = 0; i < spec.group_size; ++i) {
      const double spread =
          spec.group_size > 1 ? std::exp(spec.within_group_sigma * normal(rng)) : 1;
      const int len = std::clamp(static_cast<int>(std::lround(base * spread)), 1, dist.max());
      b.output_tokens.push_back(len);
      sum += len;
    }
    b.estimate.push_back(sum / spec.group_size * std::exp(spec.ranker_noise * normal(rng)));
  }
  return b;
}

double top_recall(const Batch& b, double fraction) {
  const int k = std::max(1, static_cast<int>(std::lround(fraction * b.groups())));
  std::vector<double> truth(b.groups(), 0);
  for (int s = 0; s < b.samples(); ++s) truth[s / b.group_size] += b.output_tokens[s];
  auto top = [&](const std::vector<double>& key) {
    std::vector<int> idx(b.groups());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return key[x] > key[y]; });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    return idx;
  };
  const std::vector<int> a = top(truth), p = top(b.estimate);
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), p.begin(), p.end(), std::back_inserter(both));
  return static_cast<double>(both.size()) / k;
}

}  // namespace streamrl::planner
