#include "streamrl/pipeline/schedule.h"

#include <algorithm>
#include <utility>

#include "streamrl/core/errors.h"

namespace streamrl::pipeline {

std::optional<StagedOp> producer(const Schedule& schedule, int stage, const Op& op) {
  const int v = schedule.virtual_stage(stage, op.chunk);
  if (op.kind == OpKind::kForward) {
    if (v == 0) return std::nullopt;
    return StagedOp{schedule.stage_of(v - 1),
                    {OpKind::kForward, op.micro_batch, schedule.chunk_of(v - 1)}};
  }
  if (v == schedule.virtual_stages() - 1) {
    return StagedOp{stage, {OpKind::kForward, op.micro_batch, op.chunk}};
  }
  return StagedOp{schedule.stage_of(v + 1),
                  {OpKind::kBackward, op.micro_batch, schedule.chunk_of(v + 1)}};
}

std::string describe(const Op& op) {
  return std::string(op.kind == OpKind::kForward ? "F" : "B") + " mb " +
         std::to_string(op.micro_batch) + " chunk " + std::to_string(op.chunk);
}

namespace {

void check_shape(const char* what, int stages, int chunks, int micro_batches) {
  if (stages < 1 || chunks < 1 || micro_batches < 1) {
    throw InputError(std::string(what) +
                     ": needs stages >= 1, chunks >= 1 and micro-batches >= 1 (got " +
                     std::to_string(stages) + ", " + std::to_string(chunks) + ", " +
                     std::to_string(micro_batches) + ")");
  }
}

// Emits `warmup` forwards, then forward/backward pairs, then the remaining backwards: the 1F1B
// shape both static schedules share. forwards[k] and backwards[k] are the k-th of each.
std::vector<Op> one_f_one_b_order(const std::vector<Op>& forwards, const std::vector<Op>& backwards,
                                  int warmup) {
  const int total = static_cast<int>(forwards.size());
  warmup = std::min(warmup, total);
  std::vector<Op> out;
  out.reserve(2 * forwards.size());
  for (int k = 0; k < warmup; ++k) out.push_back(forwards[k]);
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(forwards[warmup + k]);
    out.push_back(backwards[k]);
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backwards[k]);
  return out;
}

}  // namespace

Schedule one_f_one_b(int stages, int micro_batches) {
  check_shape("one_f_one_b", stages, 1, micro_batches);
  Schedule s{stages, 1, micro_batches, {}, "1f1b"};
  std::vector<Op> forwards, backwards;
  for (int m = 0; m < micro_batches; ++m) {
    forwards.push_back({OpKind::kForward, m, 0});
    backwards.push_back({OpKind::kBackward, m, 0});
  }
  for (int stage = 0; stage < stages; ++stage) {
    s.ops.push_back(one_f_one_b_order(forwards, backwards, stages - stage - 1));
  }
  return s;
}

Schedule interleaved_one_f_one_b(int stages, int chunks, int micro_batches) {
  check_shape("interleaved_one_f_one_b", stages, chunks, micro_batches);
  if (chunks == 1) return one_f_one_b(stages, micro_batches);
  if (micro_batches > stages && micro_batches % stages != 0) {
    throw InputError("interleaved_one_f_one_b: " + std::to_string(micro_batches) +
                     " micro-batches is not a multiple of the " + std::to_string(stages) +
                     " stages (the interleaved order would deadlock)");
  }
  Schedule s{stages, chunks, micro_batches, {}, "interleaved_1f1b"};
  // Megatron's get_schedule_table with microbatch_group_size_per_vp_stage = P: groups of P
  // micro-batches, chunk-major inside a group.
  std::vector<std::pair<int, int>> table;  // (micro-batch, chunk)
  for (int first = 0; first < micro_batches; first += stages) {
    const int last = std::min(first + stages, micro_batches);
    for (int c = 0; c < chunks; ++c) {
      for (int m = first; m < last; ++m) table.emplace_back(m, c);
    }
  }
  std::vector<Op> forwards, backwards;
  for (const auto& [m, c] : table) {
    forwards.push_back({OpKind::kForward, m, c});
    backwards.push_back({OpKind::kBackward, m, chunks - 1 - c});
  }
  for (int stage = 0; stage < stages; ++stage) {
    const int warmup = (stages - stage - 1) * 2 + (chunks - 1) * stages;
    s.ops.push_back(one_f_one_b_order(forwards, backwards, warmup));
  }
  return s;
}

}  // namespace streamrl::pipeline
