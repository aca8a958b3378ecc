// Step emulator for pipeline-parallel schedules (PipeWeaver/DIP's SEMU, arXiv 2504.14145): times
// exactly the per-stage op lists an executor runs (pipeline::Schedule), from per-layer costs
// measured by the profiler and point-to-point transfers from measured bandwidth and latency.
// Each stage runs its list in order; an op starts when the stage is free and its input has
// arrived (producer's end plus the transfer when the producer is on another stage).
//
// Memoisation (SEMU's sub-graph reuse): a stage's list is simulated in segments of consecutive
// ops whose inputs are known; a segment's result depends only on its ops' (kind, chunk,
// duration) and its inputs' arrival relative to the stage's free time, so that is the key and a
// cached segment is reused across candidates of a search and across batches. Simplifications:
// links carry transfers concurrently (no contention), and compute does not slow while sending.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/pipeline/op_costs.h"
#include "streamrl/pipeline/partition.h"
#include "streamrl/pipeline/schedule.h"
#include "streamrl/planner/model_shape.h"
#include "streamrl/planner/trace.h"

namespace streamrl::planner {

// One layer's measured costs; a micro-batch of `tokens` tokens whose squared lengths sum to
// `tokens_sq` takes per_op + per_token * tokens + per_token_sq * tokens_sq seconds (per_op: the
// fixed cost of launching the layer's kernels, which many small sub-micro-batches pay often).
struct PipelineLayerProfile {
  double forward_per_token_s = 0, forward_per_token_sq_s = 0;
  double backward_per_token_s = 0, backward_per_token_sq_s = 0;
  double activation_bytes_per_token = 0;  // kept from the forward until the backward
  double forward_per_op_s = 0, backward_per_op_s = 0;

  // One direction's {per_op, per_token, per_token_sq}, for code that fits or averages them alike.
  std::array<double, 3> terms(pipeline::OpKind kind) const;
  void set_terms(pipeline::OpKind kind, const std::array<double, 3>& t);
  // Seconds of one op in direction `kind` over `tokens` tokens whose squares sum to `tokens_sq`.
  double seconds(pipeline::OpKind kind, double tokens, double tokens_sq) const;
};

struct PipelineProfile {
  std::vector<PipelineLayerProfile> layers;  // [L] in model order
  double boundary_bytes_per_token = 0;       // activation (or gradient) sent to the next stage
  double link_bytes_per_s = 12.5e9;          // measured point-to-point bandwidth
  double link_latency_s = 20e-6;             // per message

  // A sequence's forward + backward cost through every layer: what a token-balanced split evens.
  pipeline::TokenCost token_cost() const {
    pipeline::TokenCost c{0, 0};
    for (const auto& l : layers) {
      c.per_token += l.forward_per_token_s + l.backward_per_token_s;
      c.per_token_sq += l.forward_per_token_sq_s + l.backward_per_token_sq_s;
    }
    return c;
  }
};

// Per-layer costs of `m` from its FLOPs at `flops_per_s`: 2 FLOPs per weight per token forward,
// causal attention 2 * q_dim * len^2 per sequence (QK^T and AV over half the square), backward
// twice the forward; the LM head's matmul on the last layer when `lm_head`. Activations kept per
// token and layer: 34 * hidden bytes (Megatron's estimate without the attention scores, which
// flash attention does not store); the boundary is the hidden state. Link figures are the caller's.
PipelineProfile flops_pipeline_profile(const ModelShape& m, double flops_per_s, bool lm_head);

// Op costs of `micro_batches` on `partition`. Throws InputError when the profile's layer count
// differs from the partition's or the link bandwidth is not positive.
pipeline::OpCosts pipeline_op_costs(const PipelineProfile& profile,
                                    const pipeline::Partition& partition,
                                    const std::vector<pipeline::MicroBatch>& micro_batches);

struct OpTiming {
  int stage = 0;
  pipeline::Op op;
  double start_s = 0, end_s = 0;
};

struct PipelineEmulation {
  double step_s = 0;                          // the last op's end
  std::vector<double> busy_s;                 // [stages] seconds computing
  double bubble_ratio = 0;                    // 1 - sum(busy) / (stages * step)
  std::vector<double> peak_activation_bytes;  // [stages] most held at once
  std::vector<OpTiming> timeline;             // every op, stage by stage in execution order
  int64_t memo_hits = 0, memo_misses = 0;     // segments reused / simulated by this run

  // Figures; the per-op timeline too when `with_timeline`.
  nlohmann::json to_json(bool with_timeline = false) const;
  // One track per stage under process `pid`, a span per op.
  void add_to_trace(TraceWriter& trace, int pid) const;
};

// A fresh simulation, op by op, with no cache: the reference the memoised path must match.
// Throws InputError when the schedule is invalid (pipeline::validate's message) or the costs
// do not match its shape.
PipelineEmulation emulate_pipeline(const pipeline::Schedule& schedule,
                                   const pipeline::OpCosts& costs);

// The memoised emulator; keep one per planner and call run() for every candidate and batch.
// Not thread-safe.
class PipelineEmulator {
 public:
  // At most `max_entries` cached segments; the cache is emptied when full.
  explicit PipelineEmulator(size_t max_entries = 1 << 16) : max_entries_(max_entries) {}

  // Same contract and result as emulate_pipeline (to rounding), with memo_hits/memo_misses set.
  PipelineEmulation run(const pipeline::Schedule& schedule, const pipeline::OpCosts& costs);

  size_t entries() const { return entries_; }
  void clear() { cache_.clear(), entries_ = 0; }

 private:
  struct Segment {
    std::vector<double> key;                 // (kind*V + chunk, duration, relative input) per op
    std::vector<double> start_rel, end_rel;  // relative to the stage's free time
  };
  size_t max_entries_;
  size_t entries_ = 0;
  std::unordered_map<uint64_t, std::vector<Segment>> cache_;  // by hash of Segment::key
};

}  // namespace streamrl::planner
