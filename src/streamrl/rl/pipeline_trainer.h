// The pipeline-parallel trainer (`parallel.pp`, PipeWeaver/DIP): each data-parallel replica's
// share of a batch is cut into micro-batches and run through the replica's pp stages on a schedule
// planned for that batch: the static 1F1B baseline with a fixed micro-batch count, or the
// dynamic plan (token-balanced sub-micro-batches, an interleaved order searched on the emulator).
// Every stage of a replica plans the same batch with the same profile and a candidate cap (not
// a wall-clock budget), so the stages agree on the plan without exchanging it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamrl/core/config.h"
#include "streamrl/dist/pipeline_parallel.h"
#include "streamrl/planner/pipeline_cost_fit.h"
#include "streamrl/planner/pipeline_emulator.h"
#include "streamrl/planner/pipeline_plan_ahead.h"
#include "streamrl/planner/pipeline_step_calibration.h"

namespace streamrl::rl {

// The `parallel` section of `sft` and `train`: how the ranks of `streamrl launch` split the model.
struct ParallelConfig {
  int pp = 1;                        // parallel.pp: stages per replica (launch --nproc = dp * pp)
  int chunks = 1;                    // parallel.pp_chunks: model chunks per stage (interleaved)
  std::string schedule = "dynamic";  // parallel.pp_schedule: "dynamic" or "1f1b" (static)
  int micro_batches = 0;             // parallel.pp_micro_batches: the static count (0: 2 * pp)
  // parallel.pp_waves (train only; stream and async modes): the pipeline passes of one step.
  // Each rank starts pass w once w / waves of its samples are back, on the complete groups the
  // replica's stages hold by then, so training overlaps generation; the gradients are summed over
  // the world once, after the last (the same update). 1: one pass once the batch is in.
  int waves = 1;
  // parallel.pp_partition: "measured" cuts the layers by their timed cost on this machine (every
  // rank times every layer at start-up, the ranks average); "flops" by the model's shape alone.
  std::string partition = "measured";
  // parallel.ep (MoE models, pp = 1): expert parallelism; each group of ep ranks splits every MoE
  // layer's experts and trades tokens by all-to-all (dist/expert_parallel.h).
  int ep = 1;
  // parallel.ep_chunks: token chunks every dispatch and combine is cut into, so the experts start
  // on the first chunk while the others are in flight (Lina's pipelining; 1: one exchange).
  int ep_chunks = 1;

  // Reads the `parallel` section; `train` also reads the keys only RL has (pp_waves: sft knows
  // each batch ahead). InputError for bad values.
  void read(const core::Config& parallel, bool train = false);
};

// Per-layer costs from the model's shape (FLOPs at a nominal rate; the LM head counted in the
// last layer): the same on every rank, so the replicas' stages partition and plan alike.
planner::PipelineProfile flops_profile(const model::ModelConfig& config);

// `prior` with each layer's forward and backward terms rescaled to the seconds that layer took on
// a micro-batch of about `micro_batch_tokens` tokens (model::time_layers), averaged over `world`
// so that every rank partitions and plans alike. A collective: every rank calls it.
planner::PipelineProfile measured_profile(planner::PipelineProfile prior, model::CausalLM& model,
                                          dist::ProcessGroup& world, int64_t micro_batch_tokens);

struct PipelineStepStats {
  dist::PipelineRunStats run;
  std::string schedule;  // the executed schedule's name ("1f1b", "dynamic", ...)
  std::string plan;      // the dynamic planner's choice ("<split> <order>"); empty under 1f1b
  int micro_batches = 0;
  // The emulator's step time for it: nominal-rate seconds on the first step, then from the op
  // costs fitted to the steps run so far (planner::PipelineCostFit).
  double planned_step_s = 0;
  // planned_step_s calibrated by the steps run on the fitted profile
  // (planner::PipelineStepCalibration): stages sharing a host slow each other while both compute.
  double predicted_step_s = 0;
  double step_s = 0;           // wall time of this stage's ops (waits included)
  double plan_s = 0;           // wall time the plan took to compute
  double plan_wait_s = 0;      // of which the step waited for (all of it unless planned ahead)
  bool planned_ahead = false;  // planned by plan_ahead() while the previous step ran
  double loss = 0;             // the micro-batch losses summed over the world

  // The step's record in a run's metrics (sft and train).
  nlohmann::json to_json() const;
};

class PipelineTrainer {
 public:
  // `micro_batch_tokens` is the dynamic split's target per sub-micro-batch. Throws as
  // dist::PipelineStage does.
  PipelineTrainer(model::CausalLM& model, dist::ProcessGroup& world, const ParallelConfig& config,
                  int64_t micro_batch_tokens, planner::PipelineProfile profile);

  const dist::PipelineLayout& layout() const { return stage_.layout(); }
  // This replica's rows [first, second) of a batch of n sequences.
  std::pair<int64_t, int64_t> replica_rows(int64_t n) const;
  // `bytes` from every stage of this rank's replica, in stage order: a collective over the replica
  // alone (its own group when there are several replicas).
  std::vector<std::string> gather_replica(const std::string& bytes);

  // Forward and backward of this replica's sequences of `lengths` (tokens each) on this batch's
  // plan, then gradients summed over the world: every rank ends with the whole batch's gradient.
  // The ops' measured times refit the profile the next step plans with (the same on every rank).
  // make(samples) builds a micro-batch of those sequences (indices into `lengths`), called once
  // per micro-batch in order; loss(index, scores) is that micro-batch's loss (already divided by
  // the global denominator); router_loss (MoE models) the router loss of an earlier stage's
  // layers (dist::StageRouterLoss). A collective: every rank calls it once per pass. Without
  // `reduce` the gradients stay this rank's (a pass of a step that goes on: ParallelConfig::waves);
  // the step's last pass reduces them all.
  PipelineStepStats forward_backward(
      const std::vector<int64_t>& lengths,
      const std::function<dist::StageBatch(const std::vector<int>&)>& make,
      const dist::StageLoss& loss, const model::ScoreOptions& options = {},
      const dist::StageRouterLoss& router_loss = {}, bool reduce = true);
  // Dynamic schedule: starts planning a coming step's batch (this replica's `lengths`) on a
  // background thread with the profile as it stands, so the plan is ready when
  // forward_backward(lengths, ...) asks for it and planning leaves the critical path
  // (PipeWeaver/DIP). Every rank calls it at the same point of its steps, so all plan alike; a
  // step whose lengths differ plans on the spot. No-op under 1f1b or for no sequences.
  void plan_ahead(const std::vector<int64_t>& lengths);
  // plan_ahead() of the coming step's batch when every stage of this replica knows its share
  // (`own`, in the order it will train them; nullopt: not yet known), the shares in stage order as
  // forward_backward() will see them; else nothing. A collective over the replica: every stage
  // calls it at the same point of its step (RL: before forward_backward, so the plan is made while
  // this step trains).
  void plan_next(const std::optional<std::vector<int64_t>>& own);

  // MoE models: router statistics of this step from every stage of the replica, each of its own
  // layers, merged into the whole model's (a collective over the replica). Dense: `stage`.
  model::MoeStats gather_router_stats(const model::MoeStats& stage);

 private:
  int micro_batch_count(size_t sequences) const;  // the static schedule's count for a batch
  planner::PipelinePlanOptions plan_options(int micro_batches) const;

  dist::ProcessGroup& world_;
  ParallelConfig config_;
  int64_t micro_batch_tokens_;
  size_t moe_layers_;  // the model's MoE layers (0: dense)
  // From FLOPs, rescaled to measured layer times (pp_partition: measured): partitions, plans
  // the first step.
  planner::PipelineProfile prior_;
  planner::PipelineProfile profile_;  // prior_ refitted to the ops measured so far
  pipeline::Partition partition_;
  planner::PipelineCostFit fit_;
  planner::PipelineStepCalibration calibration_;  // of the fitted profile's emulated steps
  dist::PipelineStage stage_;
  std::unique_ptr<dist::ProcessGroup> replica_;  // this replica's stages; null with one replica
  planner::PipelineEmulator emulator_;           // its memo serves every batch
  std::unique_ptr<planner::PipelinePlanAhead> ahead_;  // from the first plan_ahead() call
  int64_t ahead_id_ = 0;
};

}  // namespace streamrl::rl
