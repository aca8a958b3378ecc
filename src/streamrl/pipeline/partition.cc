#include "streamrl/pipeline/partition.h"

#include <cmath>
#include <limits>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::pipeline {

std::vector<double> Partition::virtual_stage_costs(const std::vector<double>& layer_costs) const {
  std::vector<double> out;
  for (size_t v = 0; v + 1 < boundaries.size(); ++v) {
    double sum = 0;
    for (int l = boundaries[v]; l < boundaries[v + 1]; ++l) sum += layer_costs.at(l);
    out.push_back(sum);
  }
  return out;
}

namespace {

void check_counts(int layers, int stages, int chunks) {
  if (stages < 1 || chunks < 1 || layers < stages * chunks) {
    throw InputError("partition: " + std::to_string(layers) + " layers cannot fill " +
                     std::to_string(stages) + " stages x " + std::to_string(chunks) +
                     " chunks (every chunk needs a layer)");
  }
}

}  // namespace

Partition partition_layers(const std::vector<double>& layer_costs, int stages, int chunks) {
  const int n = static_cast<int>(layer_costs.size());
  check_counts(n, stages, chunks);
  std::vector<double> prefix(n + 1, 0);
  for (int l = 0; l < n; ++l) {
    if (!(layer_costs[l] >= 0) || !std::isfinite(layer_costs[l])) {
      throw InputError("partition: layer " + std::to_string(l) + " has cost " +
                       std::to_string(layer_costs[l]) + " (needs a finite cost >= 0)");
    }
    prefix[l + 1] = prefix[l] + layer_costs[l];
  }
  const int k = stages * chunks;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[j][i]: the smallest max range cost cutting layers [0, i) into j ranges; cut[j][i]: where
  // the last of those ranges starts.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(k + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int j = 1; j <= k; ++j) {
    // The remaining k - j ranges need a layer each.
    for (int i = j; i <= n - (k - j); ++i) {
      for (int start = j - 1; start < i; ++start) {
        const double c = std::max(best[j - 1][start], prefix[i] - prefix[start]);
        if (c < best[j][i]) best[j][i] = c, cut[j][i] = start;
      }
    }
  }
  Partition p{stages, chunks, std::vector<int>(k + 1, n)};
  for (int j = k, i = n; j > 0; --j) {
    p.boundaries[j] = i;
    i = cut[j][i];
    p.boundaries[j - 1] = i;
  }
  return p;
}

Partition partition_by_count(int layers, int stages, int chunks) {
  check_counts(layers, stages, chunks);
  const int k = stages * chunks;
  Partition p{stages, chunks, {0}};
  for (int v = 0; v < k; ++v)
    p.boundaries.push_back(p.boundaries.back() + layers / k + (v < layers % k));
  return p;
}

}  // namespace streamrl::pipeline
