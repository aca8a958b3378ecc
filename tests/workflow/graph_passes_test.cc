// Teola's passes on a hand-made agent rollout: a turn that writes two tool calls, the tools, the
// next turn (its fixed header, then both results) and the verifier. Edges and times worked out by
// hand (costs in seconds).
#include <gtest/gtest.h>

#include "streamrl/core/errors.h"
#include "streamrl/workflow/graph_passes.h"
#include "streamrl/workflow/graph_schedule.h"

namespace streamrl::workflow {
namespace {

Node node(Primitive kind, std::string name, std::set<std::string> reads,
          std::set<std::string> writes, double cost) {
  Node n;
  n.kind = kind, n.name = std::move(name), n.reads = std::move(reads);
  n.writes = std::move(writes), n.cost = cost;
  return n;
}

Graph agent_rollout() {
  Node prefill1 = node(Primitive::kPrefill, "prefill1", {}, {"kv1"}, 2);
  prefill1.prompt = {{"system", 1}, {"question", 1}};
  Node decode1 = node(Primitive::kDecode, "decode1", {"kv1"}, {"ctx1"}, 6);
  decode1.emits = {{"call_a", 3}, {"call_b", 2}, {"draft", 1}};
  Node prefill2 = node(Primitive::kPrefill, "prefill2", {"ctx1"}, {"kv2"}, 2.5);
  prefill2.prompt = {{"header2", 0.5}, {"result_a", 1}, {"result_b", 1}};
  Node decode2 = node(Primitive::kDecode, "decode2", {"kv2"}, {}, 3);
  decode2.emits = {{"answer", 3}};
  return module_chain({prefill1, decode1,
                       node(Primitive::kToolCall, "tool_a", {"call_a"}, {"result_a"}, 4),
                       node(Primitive::kToolCall, "tool_b", {"call_b"}, {"result_b"}, 5), prefill2,
                       decode2, node(Primitive::kVerify, "verify", {"answer"}, {"reward"}, 0.1)});
}

bool edge(const Graph& g, const std::string& parent, const std::string& child) {
  const int p = g.find(parent), c = g.find(child);
  EXPECT_GE(p, 0) << parent;
  EXPECT_GE(c, 0) << child;
  return p >= 0 && c >= 0 && g.has_edge(p, c);
}

TEST(GraphPasses, ModuleChainRunsEverythingInSequence) {
  const Graph g = agent_rollout();
  const GraphTiming t = time_graph(g);
  EXPECT_NEAR(t.makespan, 22.6, 1e-9);
  EXPECT_EQ(t.critical_path.size(), 7u);
}

TEST(GraphPasses, PruningKeepsDataEdgesAndRunsToolsInParallel) {
  const Graph g = prune_dependencies(agent_rollout());
  EXPECT_TRUE(edge(g, "prefill1", "decode1"));
  EXPECT_TRUE(edge(g, "decode1", "tool_a"));
  EXPECT_TRUE(edge(g, "decode1", "tool_b"));
  EXPECT_FALSE(edge(g, "tool_a", "tool_b"));  // independent: parallel branches
  EXPECT_TRUE(edge(g, "tool_a", "prefill2"));
  EXPECT_TRUE(edge(g, "tool_b", "prefill2"));
  EXPECT_FALSE(edge(g, "decode1", "prefill2"));  // redundant: reached through the tools
  EXPECT_TRUE(edge(g, "decode2", "verify"));
  const GraphTiming t = time_graph(g);
  // decode1 ends at 8; tool_b 8-13 is the longer branch; then 2.5 + 3 + 0.1.
  EXPECT_NEAR(t.makespan, 18.6, 1e-9);
  EXPECT_EQ(g.node(t.critical_path[2]).name, "tool_b");
  // Topology-aware batching: tool_b has more downstream work than tool_a.
  const std::vector<double> rest = downstream_path(g);
  EXPECT_NEAR(rest[g.find("tool_b")], 10.6, 1e-9);
  EXPECT_NEAR(rest[g.find("tool_a")], 9.6, 1e-9);
  EXPECT_NEAR(rest[g.find("prefill1")], 18.6, 1e-9);
}

TEST(GraphPasses, DecodingPipeliningStartsEachToolWhenItsCallIsDecoded) {
  const Graph g = pipeline_decoding(agent_rollout());
  EXPECT_EQ(g.find("decode1"), -1);
  EXPECT_TRUE(edge(g, "decode1#1", "decode1#2"));
  EXPECT_TRUE(edge(g, "decode1#2", "decode1#3"));
  EXPECT_TRUE(edge(g, "decode1#1", "tool_a"));
  EXPECT_TRUE(edge(g, "decode1#2", "tool_b"));
  EXPECT_EQ(g.node(g.find("decode1#1")).kind, Primitive::kPartialDecode);
  EXPECT_GE(g.find("decode2"), 0);  // one emission: left whole
  const GraphTiming t = time_graph(g);
  EXPECT_NEAR(t.start[g.find("tool_a")], 5, 1e-9);
  EXPECT_NEAR(t.start[g.find("tool_b")], 7, 1e-9);
  // prefill2 waits for tool_b (12), then 2.5 + 3 + 0.1.
  EXPECT_NEAR(t.makespan, 17.6, 1e-9);
}

TEST(GraphPasses, PrefillSplitPrefillsTheFixedPartBeforeTheTools) {
  const Graph g = optimize(agent_rollout());
  const int fixed = g.find("prefill2#fixed");
  ASSERT_GE(fixed, 0);
  EXPECT_EQ(g.node(fixed).kind, Primitive::kPartialPrefill);
  EXPECT_TRUE(edge(g, "decode1#3", "prefill2#fixed"));  // the turn's context, not the tools
  EXPECT_TRUE(edge(g, "prefill2#fixed", "prefill2"));
  EXPECT_TRUE(edge(g, "tool_b", "prefill2"));
  EXPECT_NEAR(g.node(g.find("prefill2")).cost, 2.0, 1e-9);
  const GraphTiming t = time_graph(g);
  EXPECT_NEAR(t.start[fixed], 8, 1e-9);
  EXPECT_NEAR(t.makespan, 17.1, 1e-9);  // 22.6 module-level
  // A prefill that reads only inputs is never split.
  EXPECT_EQ(g.find("prefill1#fixed"), -1);
}

TEST(GraphPasses, PassSetSelectsPasses) {
  PassSet only_prune;
  only_prune.pipeline_decoding = only_prune.split_prefill = false;
  EXPECT_NEAR(time_graph(optimize(agent_rollout(), only_prune)).makespan, 18.6, 1e-9);
}

TEST(GraphPasses, CyclesAreInputErrors) {
  Graph g;
  g.add(node(Primitive::kDecode, "a", {}, {}, 1));
  g.add(node(Primitive::kDecode, "b", {}, {}, 1));
  g.add_edge(0, 1);
  g.add_edge(1, 0);
  EXPECT_THROW(g.topological_order(), InputError);
  EXPECT_THROW(g.add_edge(0, 0), InputError);
}

}  // namespace
}  // namespace streamrl::workflow
