// "Learning, measured" (issue #5): GRPO from the default task's SFT checkpoint with the
// recommended settings of configs/rl_sum.yaml, held-out greedy accuracy before and after, and the
// eval curve in between. The goal: +10 points absolute within 15 minutes on one core.
#pragma once

#include "registry.h"

namespace streamrl::bench {

// Trains on a curriculum of the task's train split (the difficulties the SFT policy can solve
// step by step, step-checked reward; see learning_bench.cc for the measurements behind it) in a
// fresh temporary run directory (removed afterwards), and evaluates the SFT checkpoint, every
// eval.every-th checkpoint and the final policy on the whole task's held-out split. When
// runs/sft_sum/final is missing, trains it first with configs/sft_sum.yaml (reported separately,
// not in `minutes`).
nlohmann::json run_learning(const BenchOptions& options);

}  // namespace streamrl::bench
