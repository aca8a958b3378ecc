// Pipeline parallelism over c10d point-to-point (PipeWeaver/DIP's executor side): each rank runs
// its stage's layers of every micro-batch in exactly the order a pipeline::Schedule lists, sending
// activations to the next virtual stage and gradients back to the previous one. The world's N
// ranks form N / pp data-parallel replicas of pp stages each; rank r is stage r % pp of replica
// r / pp (Megatron's order puts a replica's stages on consecutive ranks).
//
// Every rank keeps the whole model and, after backward, the gradients are summed over the world
// (a stage contributes zeros for layers it does not hold), so every rank takes the same optimizer
// step and holds the same weights: checkpoints, weight sync and evaluation work unchanged. The
// split saves each stage the compute and activations of the other stages' layers, not weight or
// optimizer memory.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "streamrl/dist/process_group.h"
#include "streamrl/model/transformer.h"
#include "streamrl/pipeline/op_costs.h"
#include "streamrl/pipeline/partition.h"
#include "streamrl/pipeline/schedule.h"

namespace streamrl::dist {

// Where rank `rank` of a world of `world` sits for pipeline parallelism `pp`.
struct PipelineLayout {
  int world = 1, pp = 1, rank = 0;
  // InputError unless pp >= 1 divides world.
  PipelineLayout(int world, int pp, int rank);
  int dp() const { return world / pp; }
  int stage() const { return rank % pp; }
  int dp_rank() const { return rank / pp; }
  int rank_of_stage(int stage) const { return dp_rank() * pp + stage; }
};

// One micro-batch as every stage of a replica sees it (the first stage embeds the tokens, the last
// scores them; the ones between need the shapes and the mask).
struct StageBatch {
  torch::Tensor tokens;  // [B, T] int64
  torch::Tensor valid;   // [B, T] bool
  // MoE routing replay (model::ScoreOptions::replay_routing): per MoE layer of the model, [B, T, K]
  // expert ids; each stage replays its own layers'. Empty: the stages route.
  std::vector<torch::Tensor> routing;
};

// The loss the last virtual stage backwards for micro-batch `index`, from its scores (summed,
// already divided by the global denominator, as each data-parallel rank's loss is). An MoE
// model's scores carry the router losses of the last stage's layers (scores.moe).
using StageLoss = std::function<torch::Tensor(int index, const model::ScoreOutput& scores)>;
// MoE models: the router loss a virtual stage before the last adds to its backward for
// micro-batch `index`, from its own layers' router losses (weighted as StageLoss weights the last
// stage's; an undefined or constant tensor adds nothing). Also where their statistics are seen.
using StageRouterLoss = std::function<torch::Tensor(int index, const model::MoeAuxLosses& router)>;

struct PipelineRunStats {
  double compute_s = 0;  // forward and backward of this stage's layers
  double wait_s = 0;     // blocked in recv: the bubbles this stage saw
  double loss = 0;       // sum of the micro-batches' losses (last stage) and router losses (MoE)
  int forwards = 0, backwards = 0;
  std::vector<pipeline::OpSeconds> ops;  // this stage's ops in run order, compute seconds each
};

class PipelineStage {
 public:
  // `partition` cuts the model's layers into pp stages x chunks; `world` carries the sends and the
  // gradient sum. InputError when the partition does not match the model or the layout.
  PipelineStage(model::CausalLM& model, ProcessGroup& world, int pp,
                const pipeline::Partition& partition);

  const PipelineLayout& layout() const { return layout_; }

  // Runs this stage's ops of `schedule` over `batches` (the same on every stage of a replica),
  // accumulating gradients into the parameters of the layers it holds. InputError when the
  // schedule does not match the partition or the batch count; RuntimeFailure when another stage of
  // the replica was given a different schedule or batch shapes (checked with one all-reduce before
  // any tensor moves) or a peer fails; TimeoutError when a peer does not answer.
  // `options` go to every stage's layers (e.g. the sampling temperature, routing replay's
  // replay_apply). `router_loss` (MoE models) weights the router losses of the stages before
  // the last; without it those stages train on the last stage's loss alone.
  PipelineRunStats run(const pipeline::Schedule& schedule, const std::vector<StageBatch>& batches,
                       const StageLoss& loss, const model::ScoreOptions& options = {},
                       const StageRouterLoss& router_loss = {});

  // Sums every parameter's gradient over the world (zeros where a rank has none), so each rank
  // holds the gradient one process would have computed on all replicas' batches.
  void all_reduce_gradients();

 private:
  void check_agreement(const pipeline::Schedule& schedule, const std::vector<StageBatch>& batches);

  model::CausalLM& model_;
  ProcessGroup& world_;
  PipelineLayout layout_;
  pipeline::Partition partition_;
};

}  // namespace streamrl::dist
