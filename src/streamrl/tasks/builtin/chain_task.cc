// The "chain" task: a start chain of hidden length among distractor chains.
#include "streamrl/tasks/builtin/chain_task.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {
namespace {

// Labels are 0..99, so 1- and 2-character names mix and a lookup has to match whole labels.
constexpr int kLabels = 100;
// Each chain has one node more than it has edges, so a problem uses at most 2 * n labels.
static_assert(2 * kChainMaxEdges <= kLabels);
// Distractor chains have 1..kMaxDistractorEdges edges.
constexpr int kMaxDistractorEdges = 4;

// Pareto(alpha 1.4, scale 4) over 1..30 edges: median 3, p90 ~12, p99 ~27. With the walk's length
// uniform in 1..edges, demonstrations have p90/p50 ~3.3 and p99/p50 ~8.5, and prompt plus
// demonstration stays under ~360 characters.
const std::vector<uint32_t>& edge_count_weights() {
  static const std::vector<uint32_t> weights = pareto_weights(1.4, 4.0, 1, kChainMaxEdges);
  return weights;
}

template <class T>
void shuffle_in_place(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(i) - 1))]);
  }
}

}  // namespace

std::string ChainTask::name() const { return "chain"; }

std::string ChainTask::description() const {
  return "follow 1-30 shuffled edges (count heavy-tailed, walk length hidden) from a start to a "
         "dead end: 1>60,8>77,77>1|8= -> 8>77;77>1;1>60;#60";
}

Problem ChainTask::generate(uint64_t seed) const {
  Rng rng(seed);
  const int n = 1 + static_cast<int>(rng.weighted(edge_count_weights()));
  const int walk = static_cast<int>(rng.uniform(1, n));
  // Distinct labels make every node's outgoing edge unique, so the walk is unambiguous.
  std::vector<int> labels(kLabels);
  std::iota(labels.begin(), labels.end(), 0);
  shuffle_in_place(labels, rng);
  size_t next_label = 0;
  std::vector<Edge> edges;
  auto add_chain = [&](int length) {
    int from = labels[next_label++];
    for (int i = 0; i < length; ++i) {
      const int to = labels[next_label++];
      edges.emplace_back(from, to);
      from = to;
    }
  };
  const int start = labels[0];
  add_chain(walk);
  for (int left = n - walk; left > 0;) {
    const int length = static_cast<int>(rng.uniform(1, std::min(left, kMaxDistractorEdges)));
    add_chain(length);
    left -= length;
  }
  shuffle_in_place(edges, rng);
  Problem p = make_chain_problem(edges, start);
  p.seed = seed;
  return p;
}

double ChainTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

Problem make_chain_problem(const std::vector<Edge>& edges, int start) {
  std::map<int, int> next;
  Problem p;
  for (const auto& [from, to] : edges) {
    assert(next.count(from) == 0);
    next[from] = to;
    if (!p.prompt.empty()) p.prompt += ",";
    p.prompt += std::to_string(from) + ">" + std::to_string(to);
  }
  p.prompt += '|';
  p.prompt += std::to_string(start);
  p.prompt += '=';
  int steps = 0;
  for (int node = start; next.count(node) != 0; node = next[node], ++steps) {
    assert(steps < static_cast<int>(edges.size()));
    p.demonstration += std::to_string(node) + ">" + std::to_string(next[node]) + ";";
    p.reference = std::to_string(next[node]);
  }
  assert(steps >= 1);
  p.demonstration += kAnswerMarker + p.reference;
  p.difficulty = difficulty_from_steps(steps);
  p.visible_size = static_cast<int>(edges.size());
  return p;
}

}  // namespace streamrl::tasks
