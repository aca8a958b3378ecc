// Expert parallelism combined with data parallelism (DeepSpeed-MoE's layout, as Lina trains):
// the world's N ranks form N / ep data-parallel replicas of ep ranks each; rank r is expert rank
// r % ep of replica r / ep. An expert-parallel group (one replica's ranks) trades routed tokens;
// the ranks with the same expert rank hold the same experts and reduce their gradients together.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "streamrl/dist/process_group.h"
#include "streamrl/ep/comm_scheduler.h"
#include "streamrl/model/moe.h"

namespace streamrl::dist {

class BackwardComm;

// Where rank `rank` of a world of `world` sits for expert parallelism `ep`.
struct ParallelLayout {
  int world = 1, ep = 1, rank = 0;
  // InputError unless ep >= 1 divides world.
  ParallelLayout(int world, int ep, int rank);
  int dp() const { return world / ep; }
  int ep_rank() const { return rank % ep; }
  int dp_rank() const { return rank / ep; }
  std::vector<int> expert_group() const;   // this replica's ranks
  std::vector<int> replica_group() const;  // the ranks holding this rank's experts
};

// model::ExpertExchange over a c10d group, differentiable (backward runs the reverse exchange).
class ExpertParallelGroup : public model::ExpertExchange {
 public:
  explicit ExpertParallelGroup(std::unique_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->world_size(); }
  torch::Tensor all_to_all(const torch::Tensor& x, const std::vector<int64_t>& send,
                           const std::vector<int64_t>& recv) override;
  Pending all_to_all_start(const torch::Tensor& x, const std::vector<int64_t>& send,
                           const std::vector<int64_t>& recv) override;
  int chunks() const override { return chunks_; }
  // Lina's token chunks per dispatch and combine (parallel.ep_chunks); InputError below 1.
  void set_chunks(int chunks);
  torch::Tensor combine_output(const torch::Tensor& out) override;
  ProcessGroup& group() { return *group_; }
  // Backward exchanges and combines report to `comm` (Lina's scheduling); null: none.
  void set_backward_comm(BackwardComm* comm) { comm_ = comm; }
  BackwardComm* backward_comm() const { return comm_; }

 private:
  std::unique_ptr<ProcessGroup> group_;
  BackwardComm* comm_ = nullptr;
  int chunks_ = 1;
};

// The groups one rank needs for DP x EP, built from the world (every rank calls it, with the
// same `ep`), and the gradient reduction that goes with them.
class ExpertDataParallel {
 public:
  ExpertDataParallel(ProcessGroup& world, int ep);
  const ParallelLayout& layout() const { return layout_; }
  const std::shared_ptr<ExpertParallelGroup>& experts() const { return experts_; }
  // Sums the gradients of shared parameters over the world and those of expert parameters
  // (model::is_expert_parameter) over the replica group, `chunk_bytes` per exchange (0: one).
  // With each rank's loss summed over its samples and divided by the global count, this gives
  // the gradients one process would compute on the whole batch.
  // `shared` false: only the expert parameters (a BackwardComm reduces the shared ones).
  void all_reduce_gradients(const torch::OrderedDict<std::string, torch::Tensor>& parameters,
                            int64_t chunk_bytes = 0, bool shared = true);
  // Copies `sharded` (this rank's model: the shared parameters and its slice of the experts) into
  // `whole` (the same model unsharded) on the world's rank 0, each expert sent by the rank of
  // replica 0 that holds it, as a full state dict is gathered on rank 0 to save. Every rank calls
  // it (`whole` is used on rank 0 only); the other replicas return at once.
  void gather_model(torch::nn::Module& sharded, torch::nn::Module* whole);
  // The same into every rank's `whole`, each replica within its own expert group (the replicas'
  // experts are equal after a step): an RL run's generators and evaluation need the whole model.
  void all_gather_model(torch::nn::Module& sharded, torch::nn::Module& whole);
  // `value` summed over the expert group (e.g. the squared norm of its experts' gradients).
  double sum_over_expert_group(double value);
  // The largest `value` in the expert group (e.g. micro-batches: each one is a collective).
  int64_t max_over_expert_group(int64_t value);
  // A BackwardComm over the world for the shared parameters of `parameters`, reported to by this
  // group's exchanges for as long as it lives.
  std::unique_ptr<BackwardComm> backward_comm(
      const torch::OrderedDict<std::string, torch::Tensor>& parameters,
      const ep::SchedulerOptions& options, std::chrono::milliseconds timeout);

 private:
  void gather_experts(torch::nn::Module& sharded, torch::nn::Module* whole, bool everywhere);

  ProcessGroup& world_;
  ParallelLayout layout_;
  std::shared_ptr<ExpertParallelGroup> experts_;
  std::unique_ptr<ProcessGroup> replicas_;
};

}  // namespace streamrl::dist
