// Supervised fine-tuning on task demonstrations (`streamrl sft`): the warm start that gives RL a
// policy that already solves some problems. Prompt tokens are masked out of the loss. Runs are
// resumable: a restarted run continues from its last checkpoint with the same model, optimizer,
// schedule and data position, and so reaches the same final loss as an uninterrupted run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/core/config.h"
#include "streamrl/model/moe.h"
#include "streamrl/model/sparse_training.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/pipeline_trainer.h"
#include "streamrl/rl/run_options.h"

namespace streamrl::rl {

struct SftConfig {
  RunOptions run{.name = "sft"};
  // model: a fresh model from `model_config` + `tokenizer`, or the checkpoint `init_from`
  std::string model_config = "configs/model/tiny.json";
  std::string tokenizer = "char";
  std::string init_from;
  model::MoeOptions moe;       // model.moe: MoE routing and router losses (dense models ignore it)
  std::string dtype = "auto";  // model.dtype: autocast precision on CUDA (core/device.h)
  // model.sparse_attention: DSV's predictors learn beside training and sparse heads switch to
  // sparse attention (model/sparse_training.h). One process only.
  model::SparseTrainingOptions sparse;
  DataOptions data;
  // training
  int steps = 1000;
  int batch_size = 32;            // sequences per optimizer step
  int micro_batch_tokens = 4096;  // padded tokens per forward/backward (gradient accumulation)
  // train.epoch_size: 0 draws new train problems at every step (an endless stream); N > 0 trains
  // epochs over the first N train problems, each epoch in a new seeded order.
  int epoch_size = 0;
  // train.moe_curriculum (MoE models, epoch_size > 0): from the second epoch on, order the epoch by
  // the routing complexity each problem showed when last trained (rl/moe_curriculum.h).
  bool moe_curriculum = false;
  OptimConfig optim;  // optim.total_steps is set to `steps`
  // periodic work (0 disables)
  int log_every = 10;
  int eval_every = 0;
  EvalConfig eval;  // held-out evaluation at eval_every and at the end
  // eval.loss_n: held-out problems whose demonstration loss (token-mean NLL) is measured at
  // eval_every and at the end, as "eval_loss"; 0 = none.
  int eval_loss_n = 0;
  CheckpointOptions checkpoint{.every = 200};
  // parallel: pipeline stages; under `streamrl launch --nproc N` the N ranks form N / pp
  // data-parallel replicas, each training on its share of every batch.
  ParallelConfig parallel;
  double parallel_timeout_s = 60;  // parallel.timeout_s: rendezvous and each send/recv bound
  // parallel.eval_timeout_s: how long the other ranks wait while rank 0 evaluates (expert
  // parallelism, where rank 0 alone holds the whole model).
  double parallel_eval_timeout_s = 3600;

  // Reads the `run`, `model`, `data`, `train`, `eval` and `checkpoint` sections and checks that no
  // unknown key is left. Throws InputError for bad values.
  static SftConfig from_config(const core::Config& config);
};

// Token-mean NLL of the demonstrations of held-out problems 0 .. n-1 (the task's eval split drawn
// with `seed`), in micro-batches of `micro_batch_tokens` padded tokens. No gradient.
double heldout_loss(model::CausalLM& model, const PromptEncoder& encoder, const tasks::Task& task,
                    uint64_t seed, int n, int micro_batch_tokens);

// Runs (or resumes) SFT. Returns {"final_loss", "steps", "checkpoint", "eval": {...}, ...}.
// Throws RuntimeFailure when the loss becomes NaN/inf (the last good checkpoint is kept).
nlohmann::json run_sft(const SftConfig& config, const std::string& resolved_config_yaml);

}  // namespace streamrl::rl
