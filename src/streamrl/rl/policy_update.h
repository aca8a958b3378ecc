// One GRPO/PPO optimizer step over a set of scored samples (DESIGN.md §1, §8): token-budget
// micro-batches with gradient accumulation, a global loss denominator, gradient clipping. The
// per-sample work (reward, advantage, reference log-probs) is done before, one sample at a time,
// so streaming modes can run it as samples arrive.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/policy_loss.h"

namespace streamrl::rl {

// A finished sample with the trainer's per-sample results attached.
struct ScoredSample {
  engine::Sample sample;
  double score = 0;      // the verifier's reward in [0, 1]
  double reward = 0;     // score after any shaping (KL in the reward); advantages use this
  double advantage = 0;  // filled once the sample's group is complete
  int difficulty = 0;    // of the problem, for metrics
  std::vector<float> ref_logprobs;  // [output_ids.size()]; empty when no reference model is used
};

struct UpdateConfig {
  int micro_batch_tokens = 4096;  // padded tokens per forward/backward
  // Recompute old log-probs with the trainer's weights before the update (true), or take the
  // generator's (false: valid when the generator ran the same weights, as in colocate and sync
  // modes, where they agree to ~1e-5; saves one forward pass per micro-batch).
  bool recompute_old_logprobs = false;
};

struct UpdateResult {
  PolicyLossMetrics metrics;
  double grad_norm = 0;
  double lr = 0;
  int64_t micro_batches = 0;
  int64_t tokens = 0;
  double seconds = 0;
};

// Runs one optimizer step on `samples` (one update per rollout). Throws RuntimeFailure when the
// loss or the gradient norm is not finite; parameters are then left unchanged.
UpdateResult policy_update(model::CausalLM& model, torch::optim::Optimizer& optimizer,
                           const std::vector<ScoredSample>& samples, const RlLossConfig& loss,
                           const UpdateConfig& config, double lr, double grad_clip);

// Reference log-probs of one sample's output tokens under `ref` (no grad).
std::vector<float> reference_logprobs(model::CausalLM& ref, const engine::Sample& sample);

}  // namespace streamrl::rl
