// Output-length ranker (StreamRL §5.2): the project's transformer with a small config
// reads a prompt, and a linear regression head over its output (last-token and mean-pooled logits,
// which span the final hidden state, plus log prompt length) predicts log(1 + output length).
// Trained on (prompt, observed length) pairs from rollouts of the current policy: once offline
// over a prompt set, then refit online every K iterations on a bounded window of recent rollouts.
// Only the order of the estimates is trusted (dispatch uses group statistics for magnitudes), so
// quality is reported as top-20/10/5 % recall of the truly longest and Spearman's rho.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "streamrl/model/transformer.h"

namespace streamrl::sgs {

struct RankerConfig {
  int64_t vocab_size = 0;  // the policy tokenizer's; prompts are its token ids
  int hidden_size = 64;
  int layers = 2;
  int heads = 4;
  int max_prompt_tokens = 256;  // longer prompts keep their last tokens
  // Each fit: `steps` AdamW steps of `batch_size` examples, lr decaying linearly to lr / 10.
  int steps = 300;
  int batch_size = 64;
  double lr = 3e-3;
  uint64_t seed = 0;

  nlohmann::json to_json() const;
  static RankerConfig from_json(const nlohmann::json& j);  // InputError when malformed
};

struct LengthExample {
  std::vector<int32_t> prompt_ids;
  double length = 0;  // observed output tokens
};

struct RankerMetrics {
  size_t train_examples = 0, eval_examples = 0;
  double recall_top20 = 0, recall_top10 = 0, recall_top5 = 0;
  double spearman = 0;
  double train_loss = 0;  // MSE of the standardised log length over the last tenth of the steps
  double fit_seconds = 0;
  nlohmann::json to_json() const;
};

// Recall of the true top 20/10/5 % and Spearman's rho of `predicted` against `actual`; zeros for no
// items. Throws std::invalid_argument when the sizes differ.
RankerMetrics ranking_metrics(std::span<const double> predicted, std::span<const double> actual);

class LengthRanker {
 public:
  explicit LengthRanker(const RankerConfig& config);  // random weights; InputError on bad config

  const RankerConfig& config() const { return config_; }

  // Trains on `train`, continuing from the current weights (an online refit is a fine-tune), then
  // measures ranking quality on `eval` (may be empty). InputError when `train` is empty.
  RankerMetrics fit(const std::vector<LengthExample>& train,
                    const std::vector<LengthExample>& eval);

  // Estimated output lengths in tokens, one per prompt.
  std::vector<double> predict(const std::vector<std::vector<int32_t>>& prompts);

  RankerMetrics evaluate(const std::vector<LengthExample>& examples);

  // A directory: ranker.json (configs, target scaling) + model.safetensors (encoder and head).
  // Written to a sibling and renamed into place. load() throws InputError naming a bad file.
  void save(const std::filesystem::path& dir);
  static LengthRanker load(const std::filesystem::path& dir);

 private:
  torch::Tensor forward(const std::vector<const std::vector<int32_t>*>& prompts);  // [B]

  RankerConfig config_;
  model::CausalLM encoder_{nullptr};
  torch::nn::Linear head_{nullptr};
  double target_mean_ = 0, target_std_ = 1;  // of log(1 + length) at the last fit
  uint64_t fits_ = 0;
};

// The online side: a bounded window of recent (prompt, length) pairs and a refit every
// `refit_every` iterations. One prompt in 8 (by a hash of its ids) is held out for the metrics, so
// a prompt's samples never straddle train and eval.
class OnlineRankerTrainer {
 public:
  OnlineRankerTrainer(LengthRanker& ranker, size_t window, int refit_every);

  void observe(std::vector<int32_t> prompt_ids, double length);

  // Ends one RL iteration; every `refit_every`-th call refits and returns the fit's metrics.
  std::optional<RankerMetrics> end_iteration();

  size_t window_size() const { return window_.size(); }

 private:
  LengthRanker& ranker_;
  size_t capacity_;
  int refit_every_;
  int64_t iterations_ = 0;
  std::deque<LengthExample> window_;
};

// True for the held-out eighth of prompts (FNV-1a hash of the ids).
bool held_out_prompt(const std::vector<int32_t>& prompt_ids);

}  // namespace streamrl::sgs
