// The configuration of `streamrl train` (the RL run): every section it reads, with defaults, and
// their checks. One place decides what a config means; the roles, the loop and the hooks read
// this struct, never a core::Config.
#pragma once

#include <algorithm>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/core/config.h"
#include "streamrl/core/rl_mode.h"
#include "streamrl/dist/remote_sgs.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/policy_update.h"
#include "streamrl/rl/rl_config.h"
#include "streamrl/rl/run_options.h"
#include "streamrl/sgs/sgs_config.h"

namespace streamrl::rl {

// DAPO's dynamic sampling. Keys `rollout.dynamic_sampling.*`. A
// group whose rewards are all equal has zero advantages: it is dropped (neither trained nor in
// the loss denominator) and a group on a new prompt is generated in its place, at most
// `max_refills` times per iteration (per trainer rank); refills that are dropped too are
// refilled within the same cap. When the cap is reached the iteration trains on fewer groups.
struct DynamicSamplingOptions {
  bool enabled = false;  // rollout.dynamic_sampling.enabled (false)
  int max_refills = -1;  // rollout.dynamic_sampling.max_refills (default prompts_per_iteration)
};

struct RlRunConfig {
  RunOptions run{.name = "rl"};
  core::Mode mode = core::Mode::kColocate;  // key `mode`: colocate | disagg | stream | async
  std::string init_from;  // policy checkpoint to start from (required), e.g. runs/sft_sum/final
  std::string dtype = "auto";  // model.dtype: compute precision on CUDA (core/device.h)
  DataOptions data;
  // rollout
  int prompts_per_iteration = 32;
  int group_size = 8;        // samples per prompt (GRPO group)
  int max_new_tokens = 400;  // per turn on a task with tools
  int max_turns = 8;         // rollout.max_turns: replies per tool-using rollout
  float temperature = 1.0f;
  float top_p = 1.0f;
  int max_batch_size = 64;  // engine slots
  // The most samples this mode's generator runs at once: in the dedicated modes an SGS instance's
  // sgs.max_batch_size slots, never more than its engine has (rollout.max_batch_size); the
  // colocated engine has no SGS and runs max_batch_size.
  int generation_batch() const {
    return core::traits(mode).dedicated_generator
               ? std::min(max_batch_size, sgs.dispatch.max_batch_size)
               : max_batch_size;
  }
  DynamicSamplingOptions dynamic_sampling;
  // training
  int iterations = 50;
  // Optimizer steps per iteration (train.mini_batches): the iteration's groups, split in
  // completion order, each part its own step (rl/mini_batch_step.h).
  int mini_batches = 1;
  UpdateConfig update;
  OptimConfig optim;
  RlLossConfig loss;
  AdvantageOptions adv;
  OverlongOptions overlong;
  // Resources of the dedicated modes (colocate uses run.threads for both stages): the trainer's
  // cores, and the SGS instances (`sgs:` section; generator cores = instances x
  // threads_per_instance). RL defaults to one instance with least-loaded dispatch (on this
  // 2-core machine skew-aware dispatch was measured slower, see bench skew).
  int trainer_threads = 1;
  sgs::SgsConfig sgs;
  // `sgs.urls`: `streamrl serve` instances (started from policy.init_from) that generate instead
  // of in-process ones, in the dedicated modes; sgs.instances/threads/dispatch then do not apply.
  std::vector<std::string> sgs_urls;
  model::MoeOptions moe;  // model.moe: MoE routing and router losses (dense policies ignore it)
  // model.sparse_attention: DSV beside the policy's updates (model/sparse_training.h); one trainer
  // process; in colocate mode the engine shares the policy and decodes its sparse layers sparsely,
  // dedicated engines decode dense.
  model::SparseTrainingOptions sparse;
  // Their timeouts: sgs.connect_timeout_s, stream_idle_timeout_s, weight_timeout_s,
  // health_timeout_s, health_interval_s (dist::RemoteSgsOptions).
  dist::RemoteSgsOptions sgs_remote;
  int max_staleness = 1;          // async: oldest weight version a trained sample may come from
  double sample_timeout_s = 600;  // longest wait for the next sample before the run fails
  bool trace = true;              // write <run>/trace.json
  bool tensorboard = false;       // TensorBoard event files beside metrics.jsonl
  // Write <run>/samples.jsonl: per iteration, each sample's output length and whether its
  // advantage was 0, grouped by prompt, and which refill replaced which dropped group
  // (rl::sample_record; the step emulator replays them).
  bool sample_log = false;
  // periodic work (0 disables)
  int eval_every = 10;
  EvalConfig eval;
  CheckpointOptions checkpoint;
  // parallel: pipeline stages or expert ranks of the trainer; under `streamrl launch --nproc N`
  // the N ranks generate as N data-parallel ranks and train as N / pp replicas of pp stages, or
  // N / ep replicas of ep expert ranks (each generator then holds the whole model).
  ParallelConfig parallel;

  // Reads all sections; unknown keys and bad values are InputErrors.
  static RlRunConfig from_config(const core::Config& config);
};

}  // namespace streamrl::rl
