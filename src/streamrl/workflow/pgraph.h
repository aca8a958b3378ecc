// A rollout as a p-graph (Teola): primitives (prefill, decode, tool call, parse, verify) joined by
// explicit data dependencies. Each node names the keys it reads and writes; the optimisation
// passes (graph_passes.h) rewrite edges and split nodes from those names, and the schedule
// (graph_schedule.h) follows the edges. Costs are seconds (measured or predicted).
#pragma once

#include <set>
#include <string>
#include <vector>

namespace streamrl::workflow {

enum class Primitive {
  kPrefill,
  kPartialPrefill,
  kDecode,
  kPartialDecode,
  kToolCall,
  kParse,
  kVerify
};

const char* to_string(Primitive p);

// A key a prefill reads, with its share of the prefill's cost (its tokens).
struct PromptPart {
  std::string key;
  double cost = 0;
};

// A key a decode writes as it goes (e.g. a <tool_call> block), with the decode time up to the
// end of that key: decoding pipelining starts a consumer of the key then.
struct Emission {
  std::string key;
  double cost = 0;  // decode seconds spent on this key (after the previous one)
};

struct Node {
  Primitive kind = Primitive::kPrefill;
  std::string name;
  std::set<std::string> reads, writes;
  double cost = 0;
  std::vector<PromptPart> prompt;  // prefills: what is prefilled, in order (sums to cost)
  std::vector<Emission> emits;     // decodes: what is written, in order (sums to cost)
};

class Graph {
 public:
  // Appends a node (its id is its index); keys default from `prompt` / `emits` when empty.
  int add(Node node);
  void add_edge(int parent, int child);  // InputError on an unknown id or a self-loop
  void remove_edge(int parent, int child);
  void clear_edges();

  int size() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_.at(id); }
  Node& node(int id) { return nodes_.at(id); }
  const std::set<int>& parents(int id) const { return parents_.at(id); }
  const std::set<int>& children(int id) const { return children_.at(id); }
  bool has_edge(int parent, int child) const { return children_.at(parent).count(child) > 0; }
  int find(const std::string& name) const;  // -1 when no node has that name

  // Kahn's order, ties by id; InputError naming a node on a cycle.
  std::vector<int> topological_order() const;

 private:
  std::vector<Node> nodes_;
  std::vector<std::set<int>> parents_, children_;
};

// The module-level baseline: `nodes` run one after another in the order given (each a child of
// the one before), as a framework that calls its modules in sequence does.
Graph module_chain(std::vector<Node> nodes);

}  // namespace streamrl::workflow
