#include "streamrl/rl/moe_curriculum.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace streamrl::rl {

std::vector<size_t> curriculum_order(const std::vector<RoutingProfile>& profiles) {
  std::vector<double> sum(profiles.size(), 0.0);
  std::vector<size_t> observed, unobserved;
  for (size_t i = 0; i < profiles.size(); ++i) {
    sum[i] = std::accumulate(profiles[i].begin(), profiles[i].end(), 0.0);
    (profiles[i].empty() ? unobserved : observed).push_back(i);
  }
  if (observed.empty()) return unobserved;
  const size_t anchor = *std::min_element(observed.begin(), observed.end(),
                                          [&](size_t a, size_t b) { return sum[a] < sum[b]; });
  const RoutingProfile& c = profiles[anchor];
  auto norm = [](const RoutingProfile& v) {
    return std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
  };
  const double anchor_norm = norm(c);
  std::vector<double> similarity(profiles.size(), 0.0);
  for (size_t i : observed) {
    const RoutingProfile& v = profiles[i];
    const double n = norm(v);
    if (anchor_norm == 0) {
      similarity[i] = -sum[i];  // undefined cosine: nearest the all-top-1 anchor first
    } else if (n == 0) {
      similarity[i] = 1.0;  // as simple as it gets: all top-1, so alongside the anchor
    } else {
      double dot = 0;
      for (size_t l = 0; l < std::min(v.size(), c.size()); ++l) dot += v[l] * c[l];
      similarity[i] = dot / (n * anchor_norm);
    }
  }
  std::stable_sort(observed.begin(), observed.end(), [&](size_t a, size_t b) {
    if (similarity[a] != similarity[b]) return similarity[a] > similarity[b];
    return sum[a] < sum[b];
  });
  observed.insert(observed.end(), unobserved.begin(), unobserved.end());
  return observed;
}

RoutingProfile engine_routing_profile(const engine::Sample& s) {
  const size_t L = static_cast<size_t>(s.routing_layers), K = static_cast<size_t>(s.routing_k);
  if (s.routed_experts.empty() || L == 0 || K == 0) return {};
  const size_t positions = s.routed_experts.size() / (L * K);
  RoutingProfile share(L, 0.0);
  if (positions == 0) return share;
  for (size_t t = 0; t < positions; ++t) {
    for (size_t l = 0; l < L; ++l) {
      if (K >= 2 && s.routed_experts[(t * L + l) * K + 1] >= 0) share[l] += 1;
    }
  }
  for (double& v : share) v /= static_cast<double>(positions);
  return share;
}

}  // namespace streamrl::rl
