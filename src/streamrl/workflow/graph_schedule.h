// Timing a p-graph: every node starts when its last parent finishes (the graph scheduler's rule,
// with each primitive on an engine of its own), and the per-node priority the engine scheduler
// batches by.
#pragma once

#include <vector>

#include "streamrl/workflow/pgraph.h"

namespace streamrl::workflow {

struct GraphTiming {
  std::vector<double> start, finish;  // per node, seconds from the rollout's start
  double makespan = 0;                // the critical path's length
  std::vector<int> critical_path;     // node ids, first to last
};

GraphTiming time_graph(const Graph& g);

// Topology-aware batching's priority: the seconds from each node's start to the end of the
// rollout along its longest downstream path (itself included). Among queued primitives, the one
// with the most downstream work unblocks the most and goes into the batch first.
std::vector<double> downstream_path(const Graph& g);

}  // namespace streamrl::workflow
