// Statistics of output-length distributions and of length predictions: percentiles for the skew
// of a task (StreamRL §5 dispatches on P90/P50), Spearman correlation and top-fraction recall for
// the length ranker (StreamRL Table 4).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "streamrl/core/stats.h"

namespace streamrl::tasks {

struct LengthSummary {
  size_t count = 0;
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

// The q-quantile with linear interpolation, as NumPy's default (core/stats.h).
using core::percentile;

// Throws std::invalid_argument for no values.
LengthSummary summarize(std::span<const double> values);

// Ranks 1..n with tied values sharing the average of the ranks they span ({10, 20, 20} gives
// {1, 2.5, 2.5}).
std::vector<double> average_ranks(std::span<const double> values);

// Spearman's rho: Pearson correlation of the average ranks, which stays exact with ties. 0 when it
// is undefined (fewer than two items, or one side constant), so reports never carry NaN.
// Throws std::invalid_argument when the sizes differ.
double spearman(std::span<const double> x, std::span<const double> y);

// Of the m = ceil(fraction * n) truly longest items (largest `actual`), the fraction that are among
// the m items with the largest `predicted`. Ties are broken by lower index on both sides, so the
// result is deterministic. Throws std::invalid_argument when the sizes differ, there are no items
// or fraction is outside (0, 1].
double top_fraction_recall(std::span<const double> predicted, std::span<const double> actual,
                           double fraction);

}  // namespace streamrl::tasks
