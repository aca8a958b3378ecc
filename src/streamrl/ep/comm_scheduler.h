// Lina's communication scheduler (arXiv 2210.17223, section 4): in the backward pass,
// expert-parallel all-to-alls and data-parallel gradient all-reduces share one link. Gradients are
// cut into equal byte chunks and all-to-alls into token chunks, and micro-ops are launched from a
// priority queue, so that an all-to-all waits behind at most one all-reduce chunk. One rule here
// serves the runtime and the planner's link simulation.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace streamrl::ep {

enum class OpKind { kAllToAll, kAllReduce };

enum class Policy {
  kFairShare,    // the baseline (DeepSpeed-MoE): every op launched whole as soon as it is ready, on
                 // its own stream; concurrent ops share the link
  kPriority,     // whole ops, but an all-reduce starts only while no all-to-all waits or runs
  kPartitioned,  // Lina: kPriority on micro-ops, and all-reduce held while a backward combine runs
};

Policy parse_policy(const std::string& name);  // "fair_share" | "priority" | "lina"
std::string policy_name(Policy policy);

// One launchable piece of a collective: bytes [offset, offset + bytes) of tensor `tensor`.
struct MicroOp {
  OpKind kind;
  int tensor;
  int chunk;
  int64_t offset, bytes;
};

struct SchedulerOptions {
  Policy policy = Policy::kPartitioned;
  int64_t all_reduce_chunk_bytes = 30ll << 20;  // the paper's default partition (30 MB)
  int64_t all_to_all_chunk_tokens = 512;
};

// Equal chunks of `chunk` units (the last may be shorter) of a `total`-unit tensor, scaled to bytes
// by `bytes_per_unit`. chunk <= 0 gives the whole tensor.
std::vector<MicroOp> partition(OpKind kind, int tensor, int64_t total, int64_t chunk,
                               int64_t bytes_per_unit = 1);

class CommScheduler {
 public:
  explicit CommScheduler(SchedulerOptions options = {});

  // A gradient of `bytes` is ready to all-reduce; returns its number of micro-ops.
  int submit_all_reduce(int tensor, int64_t bytes);
  // An all-to-all of `tokens` rows of `bytes_per_token` is ready; returns its number of micro-ops.
  int submit_all_to_all(int tensor, int64_t tokens, int64_t bytes_per_token);
  // An MoE layer's backward combine is computing: its all-to-all is imminent.
  void set_combine_running(bool running) { combine_running_ = running; }

  // The micro-ops to launch now, beside those in flight. Each kind runs one op at a time (one
  // stream each); the policy decides whether an all-reduce may start.
  std::vector<MicroOp> launch();
  void completed(const MicroOp& op);

  bool idle() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  SchedulerOptions options_;
  std::deque<MicroOp> all_to_all_, all_reduce_;
  bool all_to_all_running_ = false, all_reduce_running_ = false, combine_running_ = false;
};

}  // namespace streamrl::ep
