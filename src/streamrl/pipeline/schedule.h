// A pipeline schedule as plain data: per stage, the ordered forward and backward ops it runs. The
// executor runs exactly these lists and the planner's emulator times exactly these lists. Model
// chunks are interleaved (virtual pipeline): chunk c of stage s is virtual stage v = c*P + s, so
// activations flow v -> v+1 (stage s -> s+1, and stage P-1 -> stage 0 between chunks) and
// gradients flow back v+1 -> v.
//
// The static generators below follow Megatron-LM's schedules; the dynamic planner is in
// dynamic_schedule.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace streamrl::pipeline {

enum class OpKind { kForward, kBackward };

struct Op {
  OpKind kind = OpKind::kForward;
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this stage, 0 <= chunk < Schedule::chunks

  bool operator==(const Op&) const = default;
};

struct Schedule {
  int stages = 1;                    // P
  int chunks = 1;                    // V, model chunks per stage
  int micro_batches = 0;             // M
  std::vector<std::vector<Op>> ops;  // [stages] in execution order
  std::string name;                  // "1f1b", "interleaved_1f1b", "dynamic", ...

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int stage_of(int virtual_stage) const { return virtual_stage % stages; }
  int chunk_of(int virtual_stage) const { return virtual_stage / stages; }
};

// An op together with the stage that runs it.
struct StagedOp {
  int stage = 0;
  Op op;
};

// The op whose output `op` (run on `stage`) consumes: the forward of the previous virtual stage,
// the backward of the next one, or, for the last virtual stage's backward, its own forward (on the
// same stage). Empty for a forward of virtual stage 0, which reads the batch.
std::optional<StagedOp> producer(const Schedule& schedule, int stage, const Op& op);

// "F mb 3 chunk 1" (for error messages and traces).
std::string describe(const Op& op);

// Megatron's non-interleaved 1F1B (PipeDream-Flush): stage s runs min(P-s-1, M) warm-up forwards,
// then alternates one forward and one backward, then drains the remaining backwards. chunks = 1.
// Throws InputError unless stages >= 1 and micro_batches >= 1.
Schedule one_f_one_b(int stages, int micro_batches);

// Megatron's interleaved 1F1B (virtual pipeline, schedules.py): micro-batches in groups of P, each
// group run through chunk 0, then chunk 1, ... forwards, backwards in the same order with chunks
// reversed; stage s runs min((P-s-1)*2 + (V-1)*P, M*V) warm-up forwards. chunks == 1 gives
// one_f_one_b. Throws InputError when chunks > 1 and M > P is not a multiple of P: with a short
// last group this warm-up rule deadlocks for some P and V (validate finds a circular wait, e.g.
// P=8, V=2, M=10), which is why Megatron-LM long required the multiple.
Schedule interleaved_one_f_one_b(int stages, int chunks, int micro_batches);

}  // namespace streamrl::pipeline
