// The roles of an RL run, set up once before the first iteration: the trainer ranks, the task and
// its prompt encoding, the policy the trainer updates, the frozen reference, the optimizer (with
// any resumed state), and the generator. Each role's module is built here, so this is where a role
// gets its own device or parallel layout; the loop and the hooks only use what it built.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "streamrl/dist/expert_parallel.h"
#include "streamrl/dist/process_group.h"
#include "streamrl/model/sparse_training.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/rl_run_config.h"
#include "streamrl/rl/rollout_generator.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/task.h"
#include "streamrl/telemetry/trace.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::rl {

// This rank's `streamrl serve` instances: URL i goes to rank i % world, so a rank can stream from
// the instances on its own host. Each rank pushes its weights (the same on every rank after the
// gradient all-reduce) to its own instances only. InputError when there are fewer URLs than ranks.
std::vector<std::string> urls_of_rank(const std::vector<std::string>& urls, int rank, int world);

struct RlRoles {
  // Trainer data parallelism under `streamrl launch` (null: one process). Rank 0 alone writes the
  // run directory and evaluates.
  std::unique_ptr<dist::ProcessGroup> group;
  std::vector<std::string> sgs_urls;  // this rank's share of sgs.urls
  int rank = 0;
  bool lead = true;
  // The trainer's device: run.device, except that under `streamrl launch` a plain "cuda" gives
  // rank r the GPU r (mod the visible count). SGS instances without sgs.devices share it.
  std::string device = "cpu";
  std::unique_ptr<tasks::Task> owned_task;
  const tasks::Task* task = nullptr;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<PromptEncoder> prompts;
  // The module the trainer updates. Under expert parallelism (parallel.ep) it holds this rank's
  // slice of the experts; `whole` is then the same model unsharded, gathered on every rank after
  // each step, which the generators, the evaluation and the saved checkpoint use. Otherwise
  // `whole` is `policy`.
  model::CausalLM policy{nullptr};
  model::CausalLM whole{nullptr};
  std::unique_ptr<dist::ExpertDataParallel> experts;
  std::optional<model::CausalLM> reference;  // only when the loss or reward has a KL term
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // DSV's predictors and head switches beside the policy's updates (model.sparse_attention).
  std::unique_ptr<model::SparseAttentionTrainer> sparse;
  int64_t start_iteration = 0;      // > 0 when resumed from a checkpoint
  nlohmann::json curriculum_state;  // the online curriculum's outcomes at that checkpoint

  // Loads everything `c` names, resumes from the run's last checkpoint with run.resume, and gives
  // every rank rank 0's parameters. InputError when the run directory already has checkpoints
  // and run.resume is off.
  static RlRoles set_up(const RlRunConfig& c);

  // The generator the mode asks for: `streamrl serve` processes (sgs.urls), an SGS pool on its own
  // cores, or an engine sharing `whole`'s module. Its spans go to `trace` on this rank's tracks.
  std::unique_ptr<RolloutGenerator> make_generator(const RlRunConfig& c, telemetry::Trace* trace);
};

}  // namespace streamrl::rl
