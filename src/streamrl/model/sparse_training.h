// DSV's two stages while a model trains (config model.sparse_attention): the sparse-attention
// predictors learn beside the model from the attention inputs its forward captured, with no
// gradient into the model; each head's sparsity (and the predicted blocks' coverage of its
// attention mass) is profiled with momentum; a head switches to sparse attention, for good, once
// its layer's predictor loss is low enough and the head sparse and well covered enough.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/core/config.h"
#include "streamrl/model/transformer.h"

namespace streamrl::model {

// Reads and checks SparseAttentionConfig's keys (rank, block, keep, recent, min_tokens,
// decode.{block,keep,recent}) from `section`; with `required` (a checkpoint's
// sparse_attention.json, which has them all) a missing key is an error, else it keeps its default.
SparseAttentionConfig read_sparse_attention_config(const core::Config& section, bool required);

struct SparseTrainingOptions {
  bool enabled = false;
  SparseAttentionConfig attention;  // rank, blocks, min_tokens, decode
  double lr = 5e-3;                 // the predictors' Adam
  int64_t stride = 16;              // every stride-th query is scored and profiled
  double theta = 0.9;               // the critical set holds this share of the attention mass
  double momentum = 0.9;            // of the profiled loss, sparsity and coverage
  double loss_threshold = 0.3;      // a layer's heads may switch once its predictor loss is below
  double sparsity_threshold = 0.9;  // a head switches at this profiled sparsity (DSV: 90 %) ...
  double min_coverage = 0.9;        // ... when its predicted blocks hold this share of the mass
  int warmup_steps = 20;            // observations before any head may switch
  int recall_every = 8;  // observations between recall measurements (each costs a coverage's work)
  uint64_t seed = 0;     // the predictors' initialisation
  // How rows choose dense or sparse: "fixed" (min_tokens) or "measured": a fresh run times both
  // kernels for the model's layer shape on this machine (sparse::measure_speedup_table, up to
  // kMaxMeasuredTokens) and takes min_tokens from that table; a resumed run keeps its checkpoint's.
  std::string dispatch = "fixed";
  static constexpr int64_t kMaxMeasuredTokens = 4096;

  // Reads the keys of model.sparse_attention; InputError naming a bad key.
  void read(const core::Config& section);
};

class SparseAttentionTrainer {
 public:
  // Enables sparse attention on `lm` (all heads dense) unless it already has predictors, e.g. from
  // a resumed checkpoint (InputError when their rank is not options.attention.rank). `lm` must
  // outlive the trainer.
  SparseAttentionTrainer(CausalLM& lm, const SparseTrainingOptions& options);

  // One predictor step and profile on the longest row of a forward: captures as ScoreOptions::
  // capture filled them, valid [B, T] the batch's valid tokens. Switches heads that qualify.
  void observe(const std::vector<AttentionCapture>& captures, const torch::Tensor& valid);

  // The predictors learn once per training step, from its first micro-batch: begin_step() at a
  // step's start; capture(options) makes the next forward capture its attention inputs unless
  // this step has fed the predictors already (returns whether it will); after that forward (and
  // its backward, which the capture does not join), observe_captured(valid) learns from them.
  void begin_step() { fed_this_step_ = false; }
  bool capture(ScoreOptions& options);
  void observe_captured(const torch::Tensor& valid);

  // Per layer: predictor_loss, sparsity, coverage and recall (coverage over what the best block
  // choice for the same sampled rows covers: a lower bound on the predictor's share) as means
  // over heads, sparse_heads (indices).
  nlohmann::json metrics() const;
  // What chose min_tokens (the measured speed-up table, or how it was set): in metrics().
  void set_dispatch(nlohmann::json dispatch) { dispatch_ = std::move(dispatch); }
  // The predictors' Adam: a training checkpoint keeps its state.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // The profile a resumed run continues from (the predictors and sparse heads are in the model).
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  CausalLM& lm_;
  SparseTrainingOptions options_;
  std::optional<torch::optim::Adam> optimizer_;
  int64_t observed_ = 0;
  bool fed_this_step_ = false;
  nlohmann::json dispatch_;
  std::vector<AttentionCapture> captured_;                   // the forward capture() armed
  std::vector<double> loss_;                                 // per layer
  std::vector<torch::Tensor> sparsity_, coverage_, recall_;  // per layer [H] float
};

// What a trainer does with model.sparse_attention once `lm` is loaded or resumed: with `enabled`, a
// trainer continuing `resumed_state` (null: a fresh profile); otherwise none, and `lm` trains
// dense even when its checkpoint had predictors. InputError with `enabled` when the run has
// several `processes` (each would learn predictors of its own).
std::unique_ptr<SparseAttentionTrainer> start_sparse_attention(CausalLM& lm,
                                                               const SparseTrainingOptions& options,
                                                               const nlohmann::json& resumed_state,
                                                               int processes);

}  // namespace streamrl::model
