// Cost models of the two stages (StreamRL §4.2). Generation is described per
// instance by its decode step time PTL(BS, context); the emulator turns that into batch times, so
// the skew of the length distribution is part of P_gen. Training is a token rate plus a fixed
// per-iteration cost. Both come either from measurements on this machine (`streamrl profile`,
// `streamrl bench model_speed`) or from the accelerator catalogue's rooflines.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "streamrl/core/batching_sim.h"
#include "streamrl/core/ptl_table.h"
#include "streamrl/planner/hardware.h"
#include "streamrl/planner/model_shape.h"

namespace streamrl::planner {

// Seconds of one decode step, as the batching simulation reads it.
using core::StepFn;

// One generation instance (one engine; `devices` accelerators with tensor parallelism).
struct InstanceModel {
  StepFn step_seconds;
  double prefill_tokens_per_s = 0;  // 0 = prefill is free
  int max_batch = 64;               // concurrent sequences (KV-cache slots)
  int devices = 1;
};

// The trainer: training tokens (prompt + output, all passes of the algorithm) per second.
struct TrainerModel {
  double tokens_per_s = 0;
  double step_overhead_s = 0;      // optimizer step and other fixed work per iteration
  double per_sample_s = 0;         // per-sample work on arrival (reward, reference pass)
  int64_t micro_batch_tokens = 0;  // dynamic-batch budget in stream/async (0 = one batch)
  // tokens_per_s counts padded tokens of micro-batches packed as the trainer packs them (longest
  // first, rows x longest <= micro_batch_tokens), as measured on this machine; the emulator then
  // charges each micro-batch's padding. False: real tokens (roofline models, packed sequences).
  bool padded = false;
  int devices = 1;

  double seconds(int64_t tokens, int samples) const {
    return tokens / tokens_per_s + samples * per_sample_s;
  }
};

// PTL(BS, context) measured by `streamrl profile --json`, shared with the engine.
using core::PtlTable;

InstanceModel measured_instance(const PtlTable& table, int max_batch);

// Smallest power-of-two tensor-parallel degree that leaves at least half of the memory for the
// KV cache.
int choose_tp(const Accelerator& acc, const ModelShape& shape);

// Roofline decode model: per layer overhead + weights / bandwidth + batch x (matmul FLOPs / compute
// + context x KV bytes / bandwidth). The batch limit is the KV memory left after the weights over
// `mean_sequence_tokens` per sequence, at most 512.
InstanceModel roofline_instance(const Accelerator& acc, const ModelShape& shape, int tp,
                                const Efficiency& eff, double mean_sequence_tokens);

// Roofline trainer over `devices`: `flops_per_param_token` x params FLOPs per token (6 for one
// trained model; the paper's PPO with actor, critic and reference of equal size is 6+6+2+2+2=18)
// at the efficiency's MFU.
TrainerModel roofline_trainer(const Accelerator& acc, const ModelShape& shape, int devices,
                              const Efficiency& eff, double flops_per_param_token,
                              double mean_context);

// Seconds to move one copy of the weights over `gb_per_s` (the trainer-to-SGS weight push).
double weight_transfer_seconds(const ModelShape& shape, double gb_per_s);

}  // namespace streamrl::planner
