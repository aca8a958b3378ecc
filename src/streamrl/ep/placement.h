// Lina's inference placement (arXiv 2210.17223, section 5): tokens that shared experts in the last
// few layers tend to pick the same experts next, so per-layer popularity tables keyed by a token's
// recent expert path predict each expert's load before the gate runs; hot experts are then
// replicated and cold ones packed onto shared ranks (first-fit decreasing).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace streamrl::ep {

// Psi tables: for each layer and each path of the experts a token chose at the `path_length`
// layers before it, the empirical distribution of its expert at that layer.
class PathPopularity {
 public:
  PathPopularity(int num_layers, int num_experts, int path_length = 3);

  // One token's routing trace: its (top-1) expert at every layer.
  void add_trace(const std::vector<int>& experts_by_layer);

  // Predicted share of `tokens` each expert gets at `layer`; tokens[t] holds token t's experts at
  // the layers before `layer`. Each token adds the top-k of its path's distribution, weighted by
  // their probabilities (renormalised); an unseen path falls back to the layer's overall
  // distribution. Layers before the path length use the overall distribution alone.
  std::vector<double> predict(int layer, const std::vector<std::vector<int>>& tokens,
                              int k = 1) const;

  int num_experts() const { return num_experts_; }

 private:
  std::vector<double> distribution(int layer, const std::vector<int>& path) const;

  int num_layers_, num_experts_, path_length_;
  std::vector<std::map<std::vector<int>, std::vector<int64_t>>> counts_;  // per layer, per path
  std::vector<std::vector<int64_t>> overall_;                             // per layer
};

// The experts of the `m` largest entries (ties to the lower id), sorted.
std::vector<int> top_set(const std::vector<double>& load, int m);

// One rank's experts and the share of the layer's tokens each replica there serves.
struct RankLoad {
  std::vector<int> experts;
  std::vector<double> shares;
  double load() const;
};

// Places `popularity` (shares summing to 1) on `ranks` ranks: n_e = ranks * share; experts with
// n_e > 1 get round(n_e) dedicated replicas splitting their tokens, the others are packed first-fit
// decreasing into the remaining ranks (capacity 1, at most `max_per_rank` experts each; what fits
// nowhere goes to the least-loaded rank with room). Every expert lands somewhere.
std::vector<RankLoad> place_experts(const std::vector<double>& popularity, int ranks,
                                    int max_per_rank = 4);

// Lina's phase 2, after the real gate: the placement made from the prediction stands when the
// predicted and the actual top-`m` experts are the same set (the paper checks the top-2k), with
// each replica now serving its expert's actual share; otherwise it is rebuilt from the actual
// popularity. With `max_overload` > 0 it is also rebuilt when its busiest rank carries more than
// (1 + max_overload) times what the rebuilt one's would: the top set can match while a packed cold
// expert turned out warm (0: the paper's rule alone).
struct GatedPlacement {
  std::vector<RankLoad> placement;
  bool replanned = false;
};
GatedPlacement correct_after_gate(const std::vector<RankLoad>& predicted_placement,
                                  const std::vector<double>& predicted,
                                  const std::vector<double>& actual, int m, int max_per_rank = 4,
                                  double max_overload = 0);

// The static placement Lina is compared with: expert e on rank e % ranks.
std::vector<RankLoad> static_placement(const std::vector<double>& popularity, int ranks);

// The busiest rank's share of the tokens: the layer's latency is set by it.
double max_rank_load(const std::vector<RankLoad>& placement);

}  // namespace streamrl::ep
