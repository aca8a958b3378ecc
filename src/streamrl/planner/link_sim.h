// One rank's backward pass of an expert-parallel MoE step, with its all-to-alls and gradient
// all-reduces sharing one link (Lina, arXiv 2210.17223): a discrete-event simulation where the ops
// in flight split the bandwidth evenly and ep::CommScheduler decides what is launched, so the
// planner projects the same rule the runtime runs. Under Lina's policy the expert FFN also starts
// on each all-to-all chunk as it lands and returns that chunk's result at once (pipelining).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "streamrl/ep/comm_scheduler.h"

namespace streamrl::planner {

// One decoder layer's backward, in backward order (last layer first).
struct BackwardLayer {
  double compute_s = 0;        // attention and norms, after which `gradient_bytes` is ready
  int64_t gradient_bytes = 0;  // all-reduced over data parallelism
  bool moe = false;
  double combine_s = 0;                     // the combine's backward, before the first all-to-all
  int64_t tokens = 0, bytes_per_token = 0;  // each of the two all-to-alls
  double expert_s = 0;                      // expert FFN backward, between the all-to-alls
  int64_t expert_gradient_bytes = 0;        // all-reduced within the expert's replica group
};

struct Link {
  double bytes_per_s = 12.5e9;  // 100 Gb/s, the paper's testbed
  double op_latency_s = 20e-6;  // per launched micro-op
  // The share of the compute an op in flight takes from it: ~0 where copy engines and NICs move
  // the bytes (the paper's GPUs), near 1 where the cores that compute also move them (Gloo over
  // loopback on a CPU). Compute runs at (1 - compute_share) while any op is in flight.
  double compute_share = 0;
};

struct LinkSimResult {
  double backward_s = 0;     // until the last gradient is reduced
  double compute_end_s = 0;  // the last compute's end
  // Time with an all-to-all outstanding (submitted, not yet landed): what the backward pass
  // spends waiting on or moving tokens, however they are chunked.
  double all_to_all_s = 0;
  // Time the rank's compute stands blocked until an all-to-all chunk lands: what a backward
  // thread measures around its exchanges. Equal to all_to_all_s without pipelining, less with it.
  double all_to_all_blocked_s = 0;
  // The ideal for every policy: each all-to-all as one launch with the link to itself.
  double all_to_all_alone_s = 0;
};

LinkSimResult simulate_backward(const std::vector<BackwardLayer>& layers, const Link& link,
                                const ep::SchedulerOptions& options);

nlohmann::json to_json(const LinkSimResult& r);

}  // namespace streamrl::planner
