// Adaptive gating (Li et al., 2310.07188; issue #17): the tiny MoE (configs/model/tiny_moe.json)
// trained by SFT from the same init on the same data for the same tokens with top-2 gating and with
// adaptive gating (T = 0.1, 0.2), each with and without the routing curriculum, interleaved in
// chunks of steps (A B C D E A B ...) and repeated over rounds. Figures: training time to top-2's
// held-out loss (goal: adaptive >= 1.15x faster), the held-out loss gap (goal: within 1 % of
// top-2), the per-layer share of two-expert tokens and the expert-FLOP ratio. Then RL of the MoE
// policy in async mode with and without routing replay: the share of token routings the trainer and
// engine disagree on, and the reward curves.
#pragma once

#include "registry.h"

namespace streamrl::bench {

// Runs in a fresh temporary directory (removed afterwards); `options.overrides` apply to the RL
// runs (configs/rl_sum.yaml).
nlohmann::json run_moe_bench(const BenchOptions& options);

}  // namespace streamrl::bench
