// `streamrl train`: GRPO from a warm-started policy on a task's prompts. Mode `colocate` (the
// verl-like baseline): each iteration generates the whole batch with the continuous-batching
// engine, then trains on it, on the same cores and the same weights (no transfer). Runs are
// resumable from their checkpoints with identical metrics afterwards.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/core/config.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/policy_update.h"
#include "streamrl/rl/rl_config.h"
#include "streamrl/rl/run_options.h"

namespace streamrl::rl {

struct RlRunConfig {
  RunOptions run{.name = "rl"};
  std::string mode = "colocate";  // only colocate so far
  std::string init_from;  // policy checkpoint to start from (required), e.g. runs/sft_sum/final
  DataOptions data;
  // rollout
  int prompts_per_iteration = 32;
  int group_size = 8;  // samples per prompt (GRPO group)
  int max_new_tokens = 400;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int max_batch_size = 64;  // engine slots
  // training
  int iterations = 50;
  UpdateConfig update;
  OptimConfig optim;
  RlLossConfig loss;
  AdvantageOptions adv;
  // periodic work (0 disables)
  int eval_every = 10;
  EvalConfig eval;
  CheckpointOptions checkpoint;

  // Reads all sections; unknown keys and bad values are InputErrors.
  static RlRunConfig from_config(const core::Config& config);
};

// Runs (or resumes) training. Returns {"accuracy_before", "accuracy_after", "iterations",
// "checkpoint", "minutes", ...}. Throws RuntimeFailure on a non-finite loss (the last good
// checkpoint is kept and named in the message).
nlohmann::json run_rl(const RlRunConfig& config, const std::string& resolved_config_yaml);

}  // namespace streamrl::rl
