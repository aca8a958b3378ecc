#include "streamrl/workflow/pgraph.h"

#include <queue>

#include "streamrl/core/errors.h"

namespace streamrl::workflow {

const char* to_string(Primitive p) {
  switch (p) {
    case Primitive::kPrefill:
      return "prefill";
    case Primitive::kPartialPrefill:
      return "partial_prefill";
    case Primitive::kDecode:
      return "decode";
    case Primitive::kPartialDecode:
      return "partial_decode";
    case Primitive::kToolCall:
      return "tool_call";
    case Primitive::kParse:
      return "parse";
    case Primitive::kVerify:
      return "verify";
  }
  return "?";
}

int Graph::add(Node node) {
  for (const auto& p : node.prompt) node.reads.insert(p.key);
  for (const auto& e : node.emits) node.writes.insert(e.key);
  nodes_.push_back(std::move(node));
  parents_.emplace_back();
  children_.emplace_back();
  return size() - 1;
}

void Graph::add_edge(int parent, int child) {
  if (parent < 0 || child < 0 || parent >= size() || child >= size() || parent == child) {
    throw InputError("p-graph: bad edge " + std::to_string(parent) + " -> " +
                     std::to_string(child));
  }
  children_[parent].insert(child);
  parents_[child].insert(parent);
}

void Graph::remove_edge(int parent, int child) {
  children_.at(parent).erase(child);
  parents_.at(child).erase(parent);
}

void Graph::clear_edges() {
  for (auto& s : parents_) s.clear();
  for (auto& s : children_) s.clear();
}

int Graph::find(const std::string& name) const {
  for (int i = 0; i < size(); ++i) {
    if (nodes_[i].name == name) return i;
  }
  return -1;
}

std::vector<int> Graph::topological_order() const {
  std::vector<int> indegree(size());
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < size(); ++i) {
    indegree[i] = static_cast<int>(parents_[i].size());
    if (indegree[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int c : children_[v]) {
      if (--indegree[c] == 0) ready.push(c);
    }
  }
  if (static_cast<int>(order.size()) != size()) {
    for (int i = 0; i < size(); ++i) {
      if (indegree[i] > 0) throw InputError("p-graph: a cycle through '" + nodes_[i].name + "'");
    }
  }
  return order;
}

Graph module_chain(std::vector<Node> nodes) {
  Graph g;
  for (auto& n : nodes) g.add(std::move(n));
  for (int i = 1; i < g.size(); ++i) g.add_edge(i - 1, i);
  return g;
}

}  // namespace streamrl::workflow
