// Supervised fine-tuning on task demonstrations (`streamrl sft`): the warm start that gives RL a
// policy that already solves some problems. Prompt tokens are masked out of the loss. Runs are
// resumable: a restarted run continues from its last checkpoint with the same model, optimizer,
// schedule and data position, and so reaches the same final loss as an uninterrupted run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/core/config.h"
#include "streamrl/model/moe.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/run_options.h"

namespace streamrl::rl {

struct SftConfig {
  RunOptions run{.name = "sft"};
  // model: a fresh model from `model_config` + `tokenizer`, or the checkpoint `init_from`
  std::string model_config = "configs/model/tiny.json";
  std::string tokenizer = "char";
  std::string init_from;
  model::MoeOptions moe;  // model.moe: MoE routing and router losses (dense models ignore it)
  DataOptions data;
  // training
  int steps = 1000;
  int batch_size = 32;            // sequences per optimizer step
  int micro_batch_tokens = 4096;  // padded tokens per forward/backward (gradient accumulation)
  OptimConfig optim;              // optim.total_steps is set to `steps`
  // periodic work (0 disables)
  int log_every = 10;
  int eval_every = 0;
  EvalConfig eval;  // held-out evaluation at eval_every and at the end
  CheckpointOptions checkpoint{.every = 200};

  // Reads the `run`, `model`, `data`, `train`, `eval` and `checkpoint` sections and checks that no
  // unknown key is left. Throws InputError for bad values.
  static SftConfig from_config(const core::Config& config);
};

// Runs (or resumes) SFT. Returns {"final_loss", "steps", "checkpoint", "eval": {...}, ...}.
// Throws RuntimeFailure when the loss becomes NaN/inf (the last good checkpoint is kept).
nlohmann::json run_sft(const SftConfig& config, const std::string& resolved_config_yaml);

}  // namespace streamrl::rl
