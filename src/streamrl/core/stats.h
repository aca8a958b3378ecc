// Order statistics shared by the modules (length distributions, profiles, benchmark timings).
#pragma once

#include <span>
#include <vector>

namespace streamrl::core {

// The q-quantile (0 <= q <= 1) with linear interpolation between order statistics, as
// numpy.percentile's default. std::invalid_argument on no values or q outside [0, 1].
double percentile(std::span<const double> values, double q);
double percentile_of_sorted(const std::vector<double>& sorted, double q);  // ascending input

// percentile(values, 0.5): the mean of the two middle values for an even count.
double median(std::span<const double> values);

}  // namespace streamrl::core
