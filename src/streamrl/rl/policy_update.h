// One GRPO/PPO optimizer step over scored samples: token-budget micro-batches
// with gradient accumulation, a global loss denominator, gradient clipping. The per-sample work
// (reward, advantage, reference log-probs) is done before, one sample at a time, so streaming modes
// can run it as samples arrive and hand finished groups to a PolicyStep while generation goes on.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "streamrl/dist/expert_parallel.h"
#include "streamrl/dist/process_group.h"
#include "streamrl/engine/sample.h"
#include "streamrl/model/sparse_training.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/pipeline_trainer.h"
#include "streamrl/rl/policy_loss.h"
#include "streamrl/rl/trajectory.h"
#include "streamrl/telemetry/trace.h"

namespace streamrl::rl {

struct UpdateConfig {
  int micro_batch_tokens = 4096;  // padded tokens per forward/backward
  // Recompute old log-probs with the trainer's weights before the update (true), or take the
  // generator's (false: valid when the generator ran the same weights, as in colocate and sync
  // modes, where they agree to ~1e-5; saves one forward pass per micro-batch).
  bool recompute_old_logprobs = false;
  // The rollout's sampling temperature: the trainer scores softmax(logits / temperature), the
  // distribution the engine sampled from and recorded log-probs of (verl does the same).
  double temperature = 1.0;
  // MoE policies (algo.moe_curriculum): run the micro-batches of a flush in the adaptive-gating
  // curriculum's order of their samples' engine routing (rl/moe_curriculum.h), simplest first.
  bool moe_curriculum = false;
};

struct UpdateResult {
  PolicyLossMetrics metrics;
  double grad_norm = 0;
  double lr = 0;
  int64_t micro_batches = 0;
  int64_t tokens = 0;           // output tokens in the global count (skipped samples included)
  int64_t skipped_samples = 0;  // zero-advantage samples that needed no forward/backward
  int64_t steps = 0;            // optimizer steps taken (train.mini_batches per iteration)
  double seconds = 0;      // forward/backward and optimizer step, excluding waits between add()s
  double cpu_seconds = 0;  // the calling thread's CPU time in the same spans
  // MoE policies: router statistics weighted by micro-batch completion tokens, and how often the
  // trainer routed a token to another set of experts than the engine did (before any replay).
  model::MoeStats moe;
  nlohmann::json sparse_attention;  // DSV's per-layer profile after the step (null: off)
  nlohmann::json pipeline;          // parallel.pp: the step's PipelineStepStats (null: off)
};

// What the RL loop needs of one trainer step: trajectories in (eagerly as groups complete, or all
// at the end), one optimizer step out. PolicyStep is the data-parallel step; a pipelined trainer is
// another implementation, handed to the loop as a factory.
class TrainerStep {
 public:
  virtual ~TrainerStep() = default;
  // Buffers samples whose advantages are set; with `eager`, may train on them before finish().
  virtual void add(std::vector<ScoredSample> samples, bool eager) = 0;
  // Trains on what is left, then takes the optimizer step at learning rate `lr`.
  virtual UpdateResult finish(double lr, double grad_clip) = 0;
  // Before finish(), in the steps whose next step's samples may already be in (async modes with
  // a pipeline; every rank calls it or none does): `next` is all that step will be given, in
  // order, or null while some are still coming. A pipelined step plans that step's schedule while
  // it trains; others ignore it.
  virtual void preview_next(const std::vector<ScoredSample>* next) { (void)next; }
  // A pipeline pass over what was added so far, before finish() (parallel.pp_waves); others
  // ignore it. A collective for pipelined steps: every rank calls it as often per step.
  virtual void wave() {}
};

// One optimizer step assembled from samples as they arrive. Each micro-batch's loss is summed
// unnormalised and backwarded at once; finish() divides the accumulated gradients by the global
// count (tokens or sequences, rl_algorithms.md §4) before clipping and stepping. The update is
// therefore the same however the samples were split into micro-batches or when they arrived
// (`stream` gives the same update as `disagg`), up to float re-association.
class PolicyStep : public TrainerStep {
 public:
  // Zeroes the gradients of `model`; both must outlive this object.
  PolicyStep(model::CausalLM& model, torch::optim::Optimizer& optimizer, const RlLossConfig& loss,
             const UpdateConfig& config);

  // Buffers samples whose advantages are set. With `eager`, runs forward/backward on the full
  // micro-batches as soon as a micro-batch's worth of tokens is buffered (stream modes), keeping
  // a partly filled one for later samples; otherwise only at flush(). A sample
  // whose advantage is exactly 0 has no gradient when neither KL nor entropy is in the loss; it
  // then only counts in the global denominator and skips forward/backward.
  void add(std::vector<ScoredSample> samples, bool eager) override;

  // Runs forward/backward over everything still buffered, packed longest first.
  void flush();

  // flush(), then scales gradients by 1/count, clips to `grad_clip` and steps. Throws
  // RuntimeFailure when the loss or gradient norm is not finite; parameters are then unchanged.
  UpdateResult finish(double lr, double grad_clip) override;

  // Pipeline stages: the lengths of what the next step will train (after the zero-advantage
  // skip) are planned while this step trains (PipelineTrainer::plan_next, a collective only
  // steps that were previewed run).
  void preview_next(const std::vector<ScoredSample>* next) override;

  // Pipeline stages: trains what the replica's stages have added so far through the pipeline
  // now, without the gradient all-reduce, so training overlaps generation; finish() trains the
  // rest and reduces (parallel.pp_waves).
  void wave() override;

  int64_t buffered_tokens() const { return buffered_tokens_; }

  // Trainer data parallelism: each rank adds its own samples; finish() sums the
  // gradients, the global count and the loss metrics' sums over `group`'s ranks (a collective:
  // every rank calls finish() once per step), so every rank takes the step one process would
  // take on all the samples. The metrics' maxima (ratio_max, tis_weight_max) stay this rank's.
  void set_process_group(dist::ProcessGroup* group) { group_ = group; }

  // Pipeline parallelism (parallel.pp): finish() gathers what every stage of this rank's replica
  // added and trains on it through `pipeline`'s stages; `world` is the gradient and metrics
  // group. Samples are buffered until finish() (no eager micro-batches). InputError with
  // UpdateConfig::recompute_old_logprobs.
  void set_pipeline(PipelineTrainer* pipeline, dist::ProcessGroup* world);

  // Expert parallelism (parallel.ep): `model` holds this rank's slice of the experts, so each
  // forward trades tokens with the other ranks of its expert group. Samples are buffered until
  // finish(), where every rank of the group runs as many micro-batches (idle ones, of no sample,
  // where it has fewer), expert gradients are summed over their replica group, and after the
  // step the experts are gathered into `whole` on every rank: the model generators and evaluation
  // run. Both must outlive this object.
  void set_expert_parallel(dist::ExpertDataParallel* experts, model::CausalLM whole);

  // MoE policies: the router losses model.moe asks for join the loss, weighted like its terms.
  void set_moe(const model::MoeOptions& moe) { moe_ = moe; }

  // DSV: the step's first micro-batch also feeds `sparse`'s predictors and profile (a PolicyStep
  // is one optimizer step: this starts the trainer's step).
  void set_sparse_attention(model::SparseAttentionTrainer* sparse) {
    sparse_ = sparse;
    if (sparse_) sparse_->begin_step();
  }

  // Records each micro-batch as a span on `track` of `trace` (null: none).
  void set_trace(telemetry::Trace* trace, int track) { trace_ = trace, trace_track_ = track; }

 private:
  struct Prepared;  // one micro-batch's inputs
  Prepared prepare(const std::vector<const ScoredSample*>& rows) const;
  // The micro-batch's unnormalised loss from its scores; counts its tokens and metrics into
  // result_, its router statistics (MoE) into `router`.
  torch::Tensor loss_of(Prepared& p, const model::ScoreOutput& out, model::MoeStats& router);
  // MoE: the micro-batch's router loss, weighted as loss_of's terms (undefined when off); counts
  // the statistics into `router`.
  torch::Tensor router_loss(const Prepared& p, const model::MoeAuxLosses& aux,
                            model::MoeStats& router) const;
  void run_micro_batch(const std::vector<const ScoredSample*>& rows);
  void run_prepared(Prepared& p);
  // Expert parallelism: a micro-batch that moves tokens through the exchanges (as the group's
  // other ranks expect) but adds nothing to the loss, the gradients or the counts.
  void run_idle_micro_batch();
  void run_pipelined(bool last);      // last: the step's final pass, which reduces the gradients
  void run_buffered(bool full_only);  // full_only: keep a partly filled last micro-batch
  // A sample add() skips: no gradient (advantage 0 with neither KL nor entropy in the loss).
  bool skips(const ScoredSample& s) const { return skip_zero_advantage_ && s.advantage == 0.0; }
  // Reorders micro-batches (indices into buffer_) by UpdateConfig::moe_curriculum's rule.
  void order_by_curriculum(std::vector<std::vector<size_t>>* packs) const;

  model::CausalLM& model_;
  torch::optim::Optimizer& optimizer_;
  RlLossConfig loss_;
  model::MoeOptions moe_;
  UpdateConfig config_;
  std::vector<ScoredSample> buffer_;
  int64_t buffered_tokens_ = 0;  // prompt + output tokens in buffer_
  UpdateResult result_;
  double sequences_ = 0;  // trained sequences (with at least one output token)
  bool skip_zero_advantage_ = false;
  bool previewed_ = false;                            // preview_next() was called
  std::optional<std::vector<int64_t>> next_lengths_;  // its lengths, when all were in
  int waves_ = 0;                                     // pipeline passes that trained samples
  telemetry::Trace* trace_ = nullptr;
  int trace_track_ = 0;
  dist::ProcessGroup* group_ = nullptr;
  PipelineTrainer* pipeline_ = nullptr;
  dist::ExpertDataParallel* experts_ = nullptr;
  model::CausalLM whole_{nullptr};
  model::SparseAttentionTrainer* sparse_ = nullptr;
};

// Runs one optimizer step on `samples` (one update per rollout): PolicyStep over all of them.
UpdateResult policy_update(model::CausalLM& model, torch::optim::Optimizer& optimizer,
                           std::vector<ScoredSample> samples, const RlLossConfig& loss,
                           const UpdateConfig& config, double lr, double grad_clip);

// Reference log-probs of one sample's output tokens under `ref` (no grad).
std::vector<float> reference_logprobs(model::CausalLM& ref, const engine::Sample& sample);

}  // namespace streamrl::rl
