#include "streamrl/pipeline/dynamic_schedule.h"

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>

#include "streamrl/core/errors.h"

namespace streamrl::pipeline {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

void check(const OpCosts& c, const std::vector<int>& order) {
  const size_t n = static_cast<size_t>(c.stages) * c.chunks * c.micro_batches;
  if (c.stages < 1 || c.chunks < 1 || c.micro_batches < 1 || c.forward_s.size() != n ||
      c.backward_s.size() != n || c.activation_bytes.size() != n ||
      c.transfer_s.size() != static_cast<size_t>(c.micro_batches)) {
    throw InputError("dynamic_schedule: op costs for " + std::to_string(c.stages) + " stages x " +
                     std::to_string(c.chunks) + " chunks x " + std::to_string(c.micro_batches) +
                     " micro-batches are missing or mis-sized");
  }
  std::vector<bool> seen(c.micro_batches, false);
  for (int m : order) {
    if (m < 0 || m >= c.micro_batches || seen[m]) {
      throw InputError("dynamic_schedule: order is not a permutation of the " +
                       std::to_string(c.micro_batches) + " micro-batches");
    }
    seen[m] = true;
  }
  if (!order.empty() && static_cast<int>(order.size()) != c.micro_batches) {
    throw InputError("dynamic_schedule: order lists " + std::to_string(order.size()) + " of " +
                     std::to_string(c.micro_batches) + " micro-batches");
  }
}

// One stage's state while the schedule is built.
struct StageState {
  double free = 0;            // when its last scheduled op ends
  double held = 0;            // activation bytes reserved by micro-batches in flight
  int in_flight = 0;          // micro-batches entered and not yet through chunk 0's backward
  std::vector<double> ready;  // [2 * M * V] when each op's input arrives; kUnknown if not yet
  std::vector<int> pending;   // slots with a known ready time, not yet scheduled
  bool last_backward = true;  // the kind of its last op (a backward before the first)
  bool dirty = true;          // `best` must be recomputed
  int best = -1;              // slot of the op to run next, -1 when none can run
  double best_start = kUnknown;
};

}  // namespace

DynamicPlan dynamic_schedule(const OpCosts& costs, const DynamicOptions& options) {
  check(costs, options.order);
  const int P = costs.stages, V = costs.chunks, M = costs.micro_batches;
  std::vector<int> rank(M);
  for (int i = 0; i < M; ++i) rank[options.order.empty() ? i : options.order[i]] = i;

  DynamicPlan plan;
  Schedule& s = plan.schedule;
  s = Schedule{P, V, M, std::vector<std::vector<Op>>(P), "dynamic"};
  // slot = (kind * M + mb) * V + chunk, kind 0 forward, 1 backward.
  auto slot = [&](const Op& op) {
    return ((op.kind == OpKind::kForward ? 0 : 1) * M + op.micro_batch) * V + op.chunk;
  };
  auto op_of = [&](int slot) {
    return Op{slot / (M * V) == 0 ? OpKind::kForward : OpKind::kBackward, (slot / V) % M, slot % V};
  };
  std::vector<StageState> st(P);
  for (StageState& x : st) x.ready.assign(2 * M * V, kUnknown);
  auto arrive = [&](int stage, const Op& op, double t) {
    st[stage].ready[slot(op)] = t;
    st[stage].pending.push_back(slot(op));
    st[stage].dirty = true;
  };
  for (int m = 0; m < M; ++m) arrive(0, {OpKind::kForward, m, 0}, 0);

  auto reserve = [&](int stage, int mb) {
    double bytes = 0;
    for (int c = 0; c < V; ++c) bytes += costs.activation(stage, c, mb);
    return bytes;
  };
  // Sort key of a candidate: earliest start; then the kind the stage did not run last (1F1B
  // alternation, so a backward follows a forward and vice versa); then (backward) micro-batch
  // priority and nearer the input, or (forward) deeper chunk and then priority.
  auto key = [&](int stage, int slot) {
    const Op op = op_of(slot);
    const double start = std::max(st[stage].free, st[stage].ready[slot]);
    const bool backward = op.kind == OpKind::kBackward;
    const int other_kind = backward == st[stage].last_backward ? 1 : 0;
    if (backward) return std::make_tuple(start, other_kind, rank[op.micro_batch], op.chunk);
    return std::make_tuple(start, other_kind, -op.chunk, rank[op.micro_batch]);
  };
  auto choose = [&](int stage) {
    StageState& x = st[stage];
    x.best = -1, x.best_start = kUnknown, x.dirty = false;
    std::tuple<double, int, int, int> best_key;
    for (int sl : x.pending) {
      const Op op = op_of(sl);
      // A micro-batch enters a stage at its chunk-0 forward, reserving all its chunks there.
      if (op.kind == OpKind::kForward && op.chunk == 0 && options.activation_budget_bytes > 0 &&
          x.in_flight > 0 &&
          x.held + reserve(stage, op.micro_batch) > options.activation_budget_bytes) {
        continue;
      }
      const auto k = key(stage, sl);
      if (x.best < 0 || k < best_key) x.best = sl, best_key = k;
    }
    if (x.best >= 0) x.best_start = std::get<0>(best_key);
  };

  const int total = 2 * M * V * P;
  for (int done = 0; done < total; ++done) {
    int stage = -1;
    for (int p = 0; p < P; ++p) {
      if (st[p].dirty) choose(p);
      if (st[p].best >= 0 && (stage < 0 || st[p].best_start < st[stage].best_start)) stage = p;
    }
    if (stage < 0) {
      // Cannot happen: an entered micro-batch never waits on memory, and the one that entered
      // the last stage first can always finish.
      throw RuntimeFailure("dynamic_schedule: no op can run after " + std::to_string(done) +
                           " of " + std::to_string(total));
    }
    StageState& x = st[stage];
    const Op op = op_of(x.best);
    x.pending.erase(std::find(x.pending.begin(), x.pending.end(), x.best));
    const double start = x.best_start;
    const int v = s.virtual_stage(stage, op.chunk);
    const int m = op.micro_batch;
    double end;
    if (op.kind == OpKind::kForward) {
      end = start + costs.forward(stage, op.chunk, m);
      if (op.chunk == 0) x.held += reserve(stage, m), ++x.in_flight;
      if (v + 1 < s.virtual_stages()) {
        const int to = s.stage_of(v + 1);
        arrive(to, {OpKind::kForward, m, s.chunk_of(v + 1)},
               end + (to != stage ? costs.transfer_s[m] : 0));
      } else {
        arrive(stage, {OpKind::kBackward, m, op.chunk}, end);
      }
    } else {
      end = start + costs.backward(stage, op.chunk, m);
      x.held -= costs.activation(stage, op.chunk, m);
      if (op.chunk == 0) {
        if (--x.in_flight == 0) x.held = 0;  // no rounding residue on an empty stage
      }
      if (v > 0) {
        const int to = s.stage_of(v - 1);
        arrive(to, {OpKind::kBackward, m, s.chunk_of(v - 1)},
               end + (to != stage ? costs.transfer_s[m] : 0));
      }
    }
    x.free = end;
    x.last_backward = op.kind == OpKind::kBackward;
    x.dirty = true;
    s.ops[stage].push_back(op);
    plan.planned_step_s = std::max(plan.planned_step_s, end);
  }
  return plan;
}

}  // namespace streamrl::pipeline
