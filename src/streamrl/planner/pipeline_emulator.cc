#include "streamrl/planner/pipeline_emulator.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "streamrl/core/errors.h"
#include "streamrl/pipeline/validate.h"

namespace streamrl::planner {

using pipeline::Op;
using pipeline::OpCosts;
using pipeline::OpKind;
using pipeline::Schedule;

std::array<double, 3> PipelineLayerProfile::terms(OpKind kind) const {
  if (kind == OpKind::kForward)
    return {forward_per_op_s, forward_per_token_s, forward_per_token_sq_s};
  return {backward_per_op_s, backward_per_token_s, backward_per_token_sq_s};
}

void PipelineLayerProfile::set_terms(OpKind kind, const std::array<double, 3>& t) {
  if (kind == OpKind::kForward) {
    forward_per_op_s = t[0], forward_per_token_s = t[1], forward_per_token_sq_s = t[2];
  } else {
    backward_per_op_s = t[0], backward_per_token_s = t[1], backward_per_token_sq_s = t[2];
  }
}

double PipelineLayerProfile::seconds(OpKind kind, double tokens, double tokens_sq) const {
  const std::array<double, 3> t = terms(kind);
  return t[0] + t[1] * tokens + t[2] * tokens_sq;
}

PipelineProfile flops_pipeline_profile(const ModelShape& m, double flops_per_s, bool lm_head) {
  PipelineLayerProfile layer;
  layer.forward_per_token_s = 2 * m.layer_params() / flops_per_s;
  layer.forward_per_token_sq_s = 2 * m.heads * m.head_size() / flops_per_s;
  layer.backward_per_token_s = 2 * layer.forward_per_token_s;
  layer.backward_per_token_sq_s = 2 * layer.forward_per_token_sq_s;
  layer.activation_bytes_per_token = 34.0 * m.hidden;
  PipelineProfile p;
  p.layers.assign(static_cast<size_t>(m.layers), layer);
  if (lm_head && !p.layers.empty()) {
    const double head = 2.0 * m.hidden * m.vocab / flops_per_s;
    p.layers.back().forward_per_token_s += head;
    p.layers.back().backward_per_token_s += 2 * head;
  }
  p.boundary_bytes_per_token = m.hidden * m.bytes_per_param;
  return p;
}

pipeline::OpCosts pipeline_op_costs(const PipelineProfile& profile,
                                    const pipeline::Partition& partition,
                                    const std::vector<pipeline::MicroBatch>& micro_batches) {
  const int P = partition.stages, V = partition.chunks, M = static_cast<int>(micro_batches.size());
  if (partition.boundaries.size() != static_cast<size_t>(P * V + 1) ||
      partition.boundaries.back() != static_cast<int>(profile.layers.size())) {
    throw InputError(
        "pipeline_op_costs: the profile has " + std::to_string(profile.layers.size()) +
        " layers, the partition covers " +
        std::to_string(partition.boundaries.empty() ? 0 : partition.boundaries.back()));
  }
  if (!(profile.link_bytes_per_s > 0)) {
    throw InputError("pipeline_op_costs: link bandwidth must be > 0");
  }
  OpCosts c = OpCosts::zeros(P, V, M);
  for (int s = 0; s < P; ++s) {
    for (int v = 0; v < V; ++v) {
      for (int l = partition.first_layer(s, v); l < partition.end_layer(s, v); ++l) {
        const PipelineLayerProfile& L = profile.layers[l];
        for (int m = 0; m < M; ++m) {
          const double t = static_cast<double>(micro_batches[m].tokens);
          const double t2 = static_cast<double>(micro_batches[m].tokens_sq);
          const int i = c.index(s, v, m);
          c.forward_s[i] += L.seconds(OpKind::kForward, t, t2);
          c.backward_s[i] += L.seconds(OpKind::kBackward, t, t2);
          c.activation_bytes[i] += L.activation_bytes_per_token * t;
        }
      }
    }
  }
  for (int m = 0; m < M; ++m) {
    c.transfer_s[m] = profile.link_latency_s + profile.boundary_bytes_per_token *
                                                   static_cast<double>(micro_batches[m].tokens) /
                                                   profile.link_bytes_per_s;
  }
  return c;
}

nlohmann::json PipelineEmulation::to_json(bool with_timeline) const {
  nlohmann::json j = {{"step_s", step_s},
                      {"busy_s", busy_s},
                      {"bubble_ratio", bubble_ratio},
                      {"peak_activation_bytes", peak_activation_bytes},
                      {"memo_hits", memo_hits},
                      {"memo_misses", memo_misses}};
  if (with_timeline) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTiming& t : timeline) {
      ops.push_back({{"stage", t.stage},
                     {"kind", t.op.kind == OpKind::kForward ? "F" : "B"},
                     {"micro_batch", t.op.micro_batch},
                     {"chunk", t.op.chunk},
                     {"start_s", t.start_s},
                     {"end_s", t.end_s}});
    }
    j["timeline"] = std::move(ops);
  }
  return j;
}

void PipelineEmulation::add_to_trace(TraceWriter& trace, int pid) const {
  for (const OpTiming& t : timeline) {
    trace.name_track(pid, "pipeline", t.stage, "stage " + std::to_string(t.stage));
    trace.span(pid, t.stage, pipeline::describe(t.op), t.start_s, t.end_s - t.start_s,
               {{"micro_batch", t.op.micro_batch}, {"chunk", t.op.chunk}});
  }
}

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

void check_inputs(const Schedule& s, const OpCosts& c) {
  if (const std::string e = pipeline::validate(s); !e.empty()) throw InputError(e);
  const size_t n = static_cast<size_t>(s.stages) * s.chunks * s.micro_batches;
  if (c.stages != s.stages || c.chunks != s.chunks || c.micro_batches != s.micro_batches ||
      c.forward_s.size() != n || c.backward_s.size() != n || c.activation_bytes.size() != n ||
      c.transfer_s.size() != static_cast<size_t>(s.micro_batches)) {
    throw InputError("pipeline emulator: op costs are for " + std::to_string(c.stages) + " x " +
                     std::to_string(c.chunks) + " x " + std::to_string(c.micro_batches) +
                     ", the schedule has " + std::to_string(s.stages) + " stages x " +
                     std::to_string(s.chunks) + " chunks x " + std::to_string(s.micro_batches) +
                     " micro-batches (or a table is mis-sized)");
  }
}

// Shared bookkeeping of both simulations: op end times by (stage, kind, mb, chunk) and each
// op's duration and input arrival.
struct Run {
  const Schedule& s;
  const OpCosts& c;
  std::vector<std::vector<double>> end;  // [stage][slot], kUnknown until simulated

  Run(const Schedule& schedule, const OpCosts& costs)
      : s(schedule),
        c(costs),
        end(schedule.stages,
            std::vector<double>(2 * schedule.micro_batches * schedule.chunks, kUnknown)) {}

  int slot(const Op& op) const {
    return ((op.kind == OpKind::kForward ? 0 : 1) * s.micro_batches + op.micro_batch) * s.chunks +
           op.chunk;
  }
  double duration(int stage, const Op& op) const {
    return op.kind == OpKind::kForward ? c.forward(stage, op.chunk, op.micro_batch)
                                       : c.backward(stage, op.chunk, op.micro_batch);
  }
  // When the input of `op` is on `stage`: 0 for the first forward, kUnknown while its producer
  // has not been simulated.
  double input_ready(int stage, const Op& op) const {
    const std::optional<pipeline::StagedOp> p = pipeline::producer(s, stage, op);
    if (!p) return 0;
    const double e = end[p->stage][slot(p->op)];
    return p->stage == stage ? e : e + c.transfer_s[op.micro_batch];
  }
};

// Figures that need only the op lists and costs, and the timeline from the end times.
PipelineEmulation summarise(const Run& r, const std::vector<std::vector<double>>& start) {
  const Schedule& s = r.s;
  PipelineEmulation out;
  out.busy_s.assign(s.stages, 0);
  out.peak_activation_bytes = pipeline::peak_activation_bytes(s, r.c);
  for (int stage = 0; stage < s.stages; ++stage) {
    for (size_t i = 0; i < s.ops[stage].size(); ++i) {
      const Op& op = s.ops[stage][i];
      const double e = r.end[stage][r.slot(op)];
      out.timeline.push_back({stage, op, start[stage][i], e});
      out.step_s = std::max(out.step_s, e);
      out.busy_s[stage] += r.duration(stage, op);
    }
  }
  double busy = 0;
  for (double b : out.busy_s) busy += b;
  out.bubble_ratio = out.step_s > 0 ? 1 - busy / (s.stages * out.step_s) : 0;
  return out;
}

uint64_t hash_words(const std::vector<double>& key) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (double d : key) {
    uint64_t x;
    std::memcpy(&x, &d, sizeof x);
    x += 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);  // boost::hash_combine, then splitmix
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    h ^= x ^ (x >> 31);
  }
  return h;
}

// Segments stop at multiples of this many ops, so that runs whose lists share a prefix cut it
// the same way and share cache entries.
constexpr int kSegmentOps = 8;

}  // namespace

PipelineEmulation emulate_pipeline(const Schedule& schedule, const OpCosts& costs) {
  check_inputs(schedule, costs);
  Run r(schedule, costs);
  std::vector<std::vector<double>> start(schedule.stages);
  std::vector<double> free(schedule.stages, 0);
  std::vector<size_t> next(schedule.stages, 0);
  // One op per stage per sweep, in whatever order dependencies allow: the result is a longest
  // path and does not depend on the order.
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < schedule.stages; ++stage) {
      if (next[stage] == schedule.ops[stage].size()) continue;
      const Op& op = schedule.ops[stage][next[stage]];
      const double ready = r.input_ready(stage, op);
      if (ready == kUnknown) continue;
      const double t = std::max(free[stage], ready);
      start[stage].push_back(t);
      free[stage] = r.end[stage][r.slot(op)] = t + r.duration(stage, op);
      ++next[stage];
      progress = true;
    }
  }
  return summarise(r, start);
}

PipelineEmulation PipelineEmulator::run(const Schedule& schedule, const OpCosts& costs) {
  check_inputs(schedule, costs);
  Run r(schedule, costs);
  std::vector<std::vector<double>> start(schedule.stages);
  std::vector<double> free(schedule.stages, 0);
  std::vector<size_t> next(schedule.stages, 0);
  int64_t hits = 0, misses = 0;
  std::vector<double> key, ready;
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < schedule.stages; ++stage) {
      const std::vector<Op>& ops = schedule.ops[stage];
      // 1. The segment: consecutive ops with known inputs, up to the next multiple of kSegmentOps.
      key.clear(), ready.clear();
      size_t i = next[stage];
      while (i < ops.size() && (i == next[stage] || i % kSegmentOps != 0)) {
        const double t = r.input_ready(stage, ops[i]);
        if (t == kUnknown) break;
        // An input that arrived before the stage was free is as good as one arriving then.
        const double rel = std::max(0.0, t - free[stage]);
        key.insert(key.end(), {ops[i].kind == OpKind::kForward ? 0.0 : 1.0,
                               static_cast<double>(ops[i].chunk), r.duration(stage, ops[i]), rel});
        ready.push_back(rel);
        ++i;
      }
      if (ready.empty()) continue;
      // 2. Reuse a cached segment with the same key, or simulate it relative to the free time.
      const uint64_t h = hash_words(key);
      const Segment* seg = nullptr;
      if (auto it = cache_.find(h); it != cache_.end()) {
        for (const Segment& cand : it->second) {
          if (cand.key == key) seg = &cand;
        }
      }
      Segment fresh;
      if (seg) {
        ++hits;
      } else {
        ++misses;
        double t = 0;
        for (size_t k = 0; k < ready.size(); ++k) {
          fresh.start_rel.push_back(std::max(t, ready[k]));
          t = fresh.start_rel.back() + key[4 * k + 2];
          fresh.end_rel.push_back(t);
        }
        if (entries_ >= max_entries_) clear();
        fresh.key = key;
        cache_[h].push_back(std::move(fresh));
        ++entries_;
        seg = &cache_[h].back();
      }
      // 3. Back to absolute times.
      const double base = free[stage];
      for (size_t k = 0; k < seg->end_rel.size(); ++k) {
        start[stage].push_back(base + seg->start_rel[k]);
        r.end[stage][r.slot(ops[next[stage] + k])] = base + seg->end_rel[k];
      }
      free[stage] = base + seg->end_rel.back();
      next[stage] = i;
      progress = true;
    }
  }
  PipelineEmulation out = summarise(r, start);
  out.memo_hits = hits, out.memo_misses = misses;
  return out;
}

}  // namespace streamrl::planner
