#include "streamrl/workflow/graph_schedule.h"

#include <algorithm>

namespace streamrl::workflow {

GraphTiming time_graph(const Graph& g) {
  GraphTiming t;
  t.start.assign(g.size(), 0.0);
  t.finish.assign(g.size(), 0.0);
  std::vector<int> via(g.size(), -1);  // the parent that finishes last
  for (int v : g.topological_order()) {
    for (int p : g.parents(v)) {
      if (via[v] < 0 || t.finish[p] > t.finish[via[v]]) via[v] = p;
    }
    t.start[v] = via[v] < 0 ? 0.0 : t.finish[via[v]];
    t.finish[v] = t.start[v] + g.node(v).cost;
  }
  int last = -1;
  for (int v = 0; v < g.size(); ++v) {
    if (last < 0 || t.finish[v] > t.finish[last]) last = v;
  }
  if (last < 0) return t;
  t.makespan = t.finish[last];
  for (int v = last; v >= 0; v = via[v]) t.critical_path.push_back(v);
  std::reverse(t.critical_path.begin(), t.critical_path.end());
  return t;
}

std::vector<double> downstream_path(const Graph& g) {
  std::vector<double> rest(g.size(), 0.0);
  std::vector<int> order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    double after = 0;
    for (int c : g.children(*it)) after = std::max(after, rest[c]);
    rest[*it] = g.node(*it).cost + after;
  }
  return rest;
}

}  // namespace streamrl::workflow
