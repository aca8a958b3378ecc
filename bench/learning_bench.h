// "Learning from the verifier" (issues #5, #15): GRPO from the default task's SFT checkpoint with
// the recipe of configs/rl_sum.yaml (the task's final-answer reward on prompts of every
// difficulty), held-out greedy accuracy, sampled pass@1 and pass@8 before and after, by
// difficulty, and the greedy curve in between. Goals: +15 points of greedy accuracy on the whole
// task, sampled pass@1 after RL at least the SFT policy's pass@8 on difficulties 0-1, and the
// main job (SFT + RL + report) within 15 minutes on this 2-core machine.
#pragma once

#include "registry.h"

namespace streamrl::bench {

// Trains in a fresh temporary run directory (removed afterwards) with configs/rl_sum.yaml and
// `options.overrides`, and evaluates the SFT checkpoint, every eval.every-th checkpoint and the
// final policy on the task's held-out split. When runs/sft_sum/final is missing, trains it first
// with configs/sft_sum.yaml (reported separately, not in `minutes`).
nlohmann::json run_learning(const BenchOptions& options);

}  // namespace streamrl::bench
