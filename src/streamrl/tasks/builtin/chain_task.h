// "chain": follow pointers. The prompt lists edges between numbered nodes, shuffled, and a start;
// the demonstration walks the edges until a node with no outgoing edge. The walk's length is only
// bounded by the visible edge count, so most of the difficulty is hidden in the prompt's structure.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "1>60,8>77,77>1|8=", demonstration "8>77;77>1;1>60;#60", reference "60". Each step is a
// lookup of the current node's edge in the prompt (an induction-head copy), no arithmetic: a
// 0.9M-parameter model given 20k demonstrations solved 65% of one-step walks and ~5% of longer
// ones.
class ChainTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

inline constexpr int kChainMaxEdges = 30;

using Edge = std::pair<int, int>;

// The problem of walking `edges` (listed in this order) from `start`. REQUIRES every node to have
// at most one outgoing edge and the walk from `start` to end (no cycle) after at least one step.
// `seed` is left 0.
Problem make_chain_problem(const std::vector<Edge>& edges, int start);

}  // namespace streamrl::tasks
