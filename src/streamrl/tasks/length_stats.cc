// Percentiles, Spearman correlation and top-fraction recall.
#include "streamrl/tasks/length_stats.h"

#include "streamrl/core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace streamrl::tasks {
namespace {

// Indices of the m largest values, larger first and lower index first among equals.
std::vector<size_t> top_indices(std::span<const double> values, size_t m) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] > values[b]; });
  order.resize(m);
  return order;
}

}  // namespace

LengthSummary summarize(std::span<const double> values) {
  if (values.empty()) throw std::invalid_argument("summary of no values");
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  LengthSummary s;
  s.count = sorted.size();
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  s.p50 = core::percentile_of_sorted(sorted, 0.50);
  s.p90 = core::percentile_of_sorted(sorted, 0.90);
  s.p99 = core::percentile_of_sorted(sorted, 0.99);
  s.max = sorted.back();
  return s;
}

std::vector<double> average_ranks(std::span<const double> values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() && values[order[end]] == values[order[begin]]) ++end;
    // Positions begin..end-1 hold rank begin+1..end; their mean is (begin + 1 + end) / 2.
    const double rank = (begin + 1 + end) / 2.0;
    for (size_t i = begin; i < end; ++i) ranks[order[i]] = rank;
    begin = end;
  }
  return ranks;
}

double spearman(std::span<const double> x, std::span<const double> y) {
  if (x.size() != y.size()) throw std::invalid_argument("spearman of sequences of unequal size");
  if (x.size() < 2) return 0.0;
  const std::vector<double> rx = average_ranks(x);
  const std::vector<double> ry = average_ranks(y);
  const double mean = (x.size() + 1) / 2.0;  // ranks always average (n + 1) / 2
  double sxy = 0.0, sxx = 0.0, syy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  if (sxx == 0.0 || syy == 0.0) return 0.0;
  return sxy / std::sqrt(sxx * syy);
}

double top_fraction_recall(std::span<const double> predicted, std::span<const double> actual,
                           double fraction) {
  if (predicted.size() != actual.size()) {
    throw std::invalid_argument("top_fraction_recall of sequences of unequal size");
  }
  if (actual.empty()) throw std::invalid_argument("top_fraction_recall of no items");
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw std::invalid_argument("top_fraction_recall fraction outside (0, 1]");
  }
  // The epsilon keeps 0.1 * 30 = 3.0000000000000004 from rounding up to 4.
  const size_t m = std::clamp<size_t>(
      static_cast<size_t>(std::ceil(fraction * actual.size() - 1e-9)), 1, actual.size());
  const std::vector<size_t> truly_longest = top_indices(actual, m);
  std::vector<bool> predicted_longest(actual.size(), false);
  for (size_t i : top_indices(predicted, m)) predicted_longest[i] = true;
  size_t hits = 0;
  for (size_t i : truly_longest) hits += predicted_longest[i] ? 1 : 0;
  return static_cast<double>(hits) / m;
}

}  // namespace streamrl::tasks
