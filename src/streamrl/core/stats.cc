#include "streamrl/core/stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace streamrl::core {

double percentile_of_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("percentile of no values");
  if (!(q >= 0.0 && q <= 1.0)) throw std::invalid_argument("percentile q outside [0, 1]");
  const double h = (sorted.size() - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

double percentile(std::span<const double> values, double q) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return percentile_of_sorted(sorted, q);
}

double median(std::span<const double> values) { return percentile(values, 0.5); }

}  // namespace streamrl::core
