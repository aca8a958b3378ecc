#include "streamrl/ep/placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::ep {

PathPopularity::PathPopularity(int num_layers, int num_experts, int path_length)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      path_length_(path_length),
      counts_(num_layers),
      overall_(num_layers, std::vector<int64_t>(num_experts, 0)) {
  if (num_layers < 1 || num_experts < 1 || path_length < 1) {
    throw InputError("popularity tables need >= 1 layer, expert and path step");
  }
}

void PathPopularity::add_trace(const std::vector<int>& experts) {
  if (static_cast<int>(experts.size()) != num_layers_) {
    throw InputError("routing trace has " + std::to_string(experts.size()) + " layers, expected " +
                     std::to_string(num_layers_));
  }
  for (int l = 0; l < num_layers_; ++l) {
    const int e = experts[l];
    if (e < 0 || e >= num_experts_) {
      throw InputError("routing trace names expert " + std::to_string(e) + " of " +
                       std::to_string(num_experts_));
    }
    ++overall_[l][e];
    if (l < path_length_) continue;
    std::vector<int64_t>& row =
        counts_[l][{experts.begin() + l - path_length_, experts.begin() + l}];
    if (row.empty()) row.assign(num_experts_, 0);
    ++row[e];
  }
}

std::vector<double> PathPopularity::distribution(int layer, const std::vector<int>& path) const {
  const std::vector<int64_t>* row = &overall_[layer];
  if (layer >= path_length_ && static_cast<int>(path.size()) >= layer) {
    const auto it =
        counts_[layer].find({path.begin() + layer - path_length_, path.begin() + layer});
    if (it != counts_[layer].end()) row = &it->second;
  }
  const double total = std::accumulate(row->begin(), row->end(), 0.0);
  std::vector<double> p(num_experts_, total > 0 ? 0.0 : 1.0 / num_experts_);
  if (total > 0) {
    for (int e = 0; e < num_experts_; ++e) p[e] = (*row)[e] / total;
  }
  return p;
}

std::vector<double> PathPopularity::predict(int layer, const std::vector<std::vector<int>>& tokens,
                                            int k) const {
  if (layer < 0 || layer >= num_layers_) throw InputError("no such MoE layer");
  std::vector<double> load(num_experts_, 0.0);
  for (const std::vector<int>& path : tokens) {
    const std::vector<double> p = distribution(layer, path);
    const std::vector<int> top = top_set(p, std::min(k, num_experts_));
    double mass = 0;
    for (int e : top) mass += p[e];
    for (int e : top) load[e] += mass > 0 ? p[e] / mass : 1.0 / top.size();
  }
  if (!tokens.empty()) {
    for (double& x : load) x /= tokens.size();
  }
  return load;
}

std::vector<int> top_set(const std::vector<double>& load, int m) {
  std::vector<int> ids(load.size());
  std::iota(ids.begin(), ids.end(), 0);
  m = std::clamp(m, 0, static_cast<int>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + m, ids.end(), [&](int a, int b) {
    return load[a] > load[b] || (load[a] == load[b] && a < b);
  });
  ids.resize(m);
  std::sort(ids.begin(), ids.end());
  return ids;
}

double RankLoad::load() const { return std::accumulate(shares.begin(), shares.end(), 0.0); }

std::vector<RankLoad> place_experts(const std::vector<double>& popularity, int ranks,
                                    int max_per_rank) {
  const int n = static_cast<int>(popularity.size());
  if (ranks < 1 || max_per_rank < 1 || static_cast<int64_t>(ranks) * max_per_rank < n) {
    throw InputError("cannot place " + std::to_string(n) + " experts on " + std::to_string(ranks) +
                     " ranks of at most " + std::to_string(max_per_rank));
  }
  std::vector<int> replicas(n, 0);
  std::vector<int> cold;
  for (int e = 0; e < n; ++e) {
    const double need = ranks * popularity[e];
    if (need > 1.0) {
      replicas[e] = static_cast<int>(std::lround(need));
    } else {
      cold.push_back(e);
    }
  }
  // The cold experts need at least ceil(cold / max_per_rank) ranks; take replicas from the
  // experts whose replicas would each carry the least until they fit.
  auto cold_ranks = [&] {
    return (static_cast<int>(cold.size()) + max_per_rank - 1) / max_per_rank;
  };
  int hot_ranks = std::accumulate(replicas.begin(), replicas.end(), 0);
  while (hot_ranks > ranks - cold_ranks()) {
    int worst = -1;
    for (int e = 0; e < n; ++e) {
      if (replicas[e] > 1 &&
          (worst < 0 || popularity[e] / replicas[e] < popularity[worst] / replicas[worst])) {
        worst = e;
      }
    }
    if (worst < 0) {  // only single replicas left: the least popular hot expert joins the cold
      for (int e = 0; e < n; ++e) {
        if (replicas[e] == 1 && (worst < 0 || popularity[e] < popularity[worst])) worst = e;
      }
      cold.push_back(worst);
    }
    --replicas[worst];
    --hot_ranks;
  }
  std::vector<RankLoad> out;
  for (int e = 0; e < n; ++e) {
    for (int r = 0; r < replicas[e]; ++r) out.push_back({{e}, {popularity[e] / replicas[e]}});
  }
  const size_t first_cold = out.size();
  out.resize(ranks);
  std::stable_sort(cold.begin(), cold.end(),
                   [&](int a, int b) { return popularity[a] > popularity[b]; });
  for (int e : cold) {
    const double share = popularity[e];
    const auto room = [&](const RankLoad& r) {
      return static_cast<int>(r.experts.size()) < max_per_rank;
    };
    RankLoad* target = nullptr;
    for (size_t r = first_cold; r < out.size() && !target; ++r) {
      if (room(out[r]) && out[r].load() * ranks + share * ranks <= 1.0 + 1e-9) target = &out[r];
    }
    if (!target) {  // nothing fits: the least-loaded rank with room (one exists)
      for (RankLoad& r : out) {
        if (room(r) && (!target || r.load() < target->load())) target = &r;
      }
    }
    target->experts.push_back(e);
    target->shares.push_back(share);
  }
  return out;
}

GatedPlacement correct_after_gate(const std::vector<RankLoad>& predicted_placement,
                                  const std::vector<double>& predicted,
                                  const std::vector<double>& actual, int m, int max_per_rank,
                                  double max_overload) {
  if (predicted.size() != actual.size()) {
    throw InputError("predicted and actual popularity cover " + std::to_string(predicted.size()) +
                     " and " + std::to_string(actual.size()) + " experts");
  }
  const int ranks = static_cast<int>(predicted_placement.size());
  if (top_set(predicted, m) != top_set(actual, m)) {
    return {place_experts(actual, ranks, max_per_rank), true};
  }
  std::vector<int> replicas(actual.size(), 0);
  for (const RankLoad& r : predicted_placement) {
    for (int e : r.experts) ++replicas.at(e);
  }
  GatedPlacement out{predicted_placement, false};
  for (RankLoad& r : out.placement) {
    for (size_t i = 0; i < r.experts.size(); ++i) {
      r.shares[i] = actual[r.experts[i]] / replicas[r.experts[i]];
    }
  }
  if (max_overload > 0) {
    std::vector<RankLoad> rebuilt = place_experts(actual, ranks, max_per_rank);
    if (max_rank_load(out.placement) > (1 + max_overload) * max_rank_load(rebuilt)) {
      return {std::move(rebuilt), true};
    }
  }
  return out;
}

std::vector<RankLoad> static_placement(const std::vector<double>& popularity, int ranks) {
  if (ranks < 1) throw InputError("static placement needs >= 1 rank");
  std::vector<RankLoad> out(ranks);
  for (size_t e = 0; e < popularity.size(); ++e) {
    out[e % ranks].experts.push_back(static_cast<int>(e));
    out[e % ranks].shares.push_back(popularity[e]);
  }
  return out;
}

double max_rank_load(const std::vector<RankLoad>& placement) {
  double worst = 0;
  for (const RankLoad& r : placement) worst = std::max(worst, r.load());
  return worst;
}

}  // namespace streamrl::ep
