#include "streamrl/workflow/graph_passes.h"

#include <functional>
#include <map>

namespace streamrl::workflow {
namespace {

// Whether `target` is reachable from `from` following edges.
bool reaches(const Graph& g, int from, int target) {
  std::vector<int> stack = {from};
  std::vector<bool> seen(g.size(), false);
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (v == target) return true;
    if (seen[v]) continue;
    seen[v] = true;
    for (int c : g.children(v)) stack.push_back(c);
  }
  return false;
}

// The key through which one part of a split node hands its state (KV cache) to the next.
std::string state_key(const std::string& name) { return name + ".state"; }

}  // namespace

Graph prune_dependencies(const Graph& g) {
  Graph out;
  for (int i = 0; i < g.size(); ++i) out.add(g.node(i));
  std::map<std::string, int> last_writer;
  for (int v = 0; v < out.size(); ++v) {
    for (const auto& key : out.node(v).reads) {
      auto it = last_writer.find(key);
      if (it != last_writer.end()) out.add_edge(it->second, v);
    }
    for (const auto& key : out.node(v).writes) last_writer[key] = v;
  }
  // Redundant parents: reached through another parent anyway.
  for (int v = 0; v < out.size(); ++v) {
    const std::set<int> parents = out.parents(v);
    for (int p : parents) {
      for (int q : parents) {
        if (q != p && out.has_edge(p, v) && reaches(out, p, q)) {
          out.remove_edge(p, v);
          break;
        }
      }
    }
  }
  return out;
}

// The nodes of `g` in program order, each replaced by what `expand` returns for it (itself when
// empty), with the edges rebuilt from the keys once at the end.
Graph rewrite(const Graph& g, const std::function<std::vector<Node>(int)>& expand) {
  Graph out;
  for (int v = 0; v < g.size(); ++v) {
    std::vector<Node> parts = expand(v);
    if (parts.empty()) parts = {g.node(v)};
    for (auto& p : parts) out.add(std::move(p));
  }
  return prune_dependencies(out);
}

Graph pipeline_decoding(const Graph& g) {
  return rewrite(g, [&](int v) {
    const Node& d = g.node(v);
    std::vector<Node> parts;
    if (d.kind != Primitive::kDecode || d.emits.size() < 2) return parts;
    for (size_t i = 0; i < d.emits.size(); ++i) {
      Node p;
      p.kind = Primitive::kPartialDecode;
      p.name = d.name + "#" + std::to_string(i + 1);
      p.cost = d.emits[i].cost;
      p.emits = {d.emits[i]};
      // The first part reads what the decode read; each later one continues the one before.
      if (i == 0) p.reads = d.reads;
      if (i > 0) p.reads.insert(state_key(parts.back().name));
      if (i + 1 < d.emits.size()) p.writes.insert(state_key(p.name));
      // Keys the decode writes besides its emissions are complete with its last part.
      if (i + 1 == d.emits.size()) {
        for (const auto& key : d.writes) {
          bool earlier = false;
          for (size_t j = 0; j + 1 < d.emits.size(); ++j)
            earlier = earlier || d.emits[j].key == key;
          if (!earlier) p.writes.insert(key);
        }
      }
      parts.push_back(std::move(p));
    }
    return parts;
  });
}

Graph split_prefill(const Graph& g) {
  std::map<std::string, Primitive> writer_kind;  // latest writer of each key before the node
  return rewrite(g, [&](int v) {
    const Node& p = g.node(v);
    std::vector<Node> parts;
    auto waits_on_tools = [&](const PromptPart& part) {
      auto it = writer_kind.find(part.key);
      return it != writer_kind.end() &&
             (it->second == Primitive::kToolCall || it->second == Primitive::kParse);
    };
    size_t fixed = 0;
    while (fixed < p.prompt.size() && !waits_on_tools(p.prompt[fixed])) ++fixed;
    for (const auto& key : p.writes) writer_kind[key] = p.kind;
    if (p.kind != Primitive::kPrefill || fixed == 0 || fixed == p.prompt.size()) return parts;
    Node early, rest;
    early.kind = Primitive::kPartialPrefill;
    early.name = p.name + "#fixed";
    early.prompt.assign(p.prompt.begin(), p.prompt.begin() + static_cast<std::ptrdiff_t>(fixed));
    for (const auto& part : early.prompt) early.cost += part.cost;
    early.writes.insert(state_key(early.name));
    rest = p;
    rest.prompt.assign(p.prompt.begin() + static_cast<std::ptrdiff_t>(fixed), p.prompt.end());
    rest.reads.clear();
    rest.cost = 0;
    for (const auto& part : rest.prompt) rest.reads.insert(part.key), rest.cost += part.cost;
    rest.reads.insert(state_key(early.name));
    // Reads that are not prompt parts (e.g. the KV of earlier turns) belong to the early part.
    for (const auto& key : p.reads) {
      bool in_prompt = false;
      for (const auto& part : p.prompt) in_prompt = in_prompt || part.key == key;
      if (!in_prompt) early.reads.insert(key);
    }
    return std::vector<Node>{early, rest};
  });
}

Graph optimize(const Graph& g, const PassSet& passes) {
  Graph cur = g;
  if (passes.prune) cur = prune_dependencies(cur);
  if (passes.pipeline_decoding) cur = pipeline_decoding(cur);
  if (passes.split_prefill) cur = split_prefill(cur);
  return cur;
}

}  // namespace streamrl::workflow
