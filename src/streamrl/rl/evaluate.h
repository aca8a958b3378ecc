// Held-out evaluation of a policy on a task: accuracy, response lengths, accuracy by difficulty.
// Used by `streamrl eval`, periodic SFT eval, and the before/after figures of RL runs.
#pragma once

#include <map>
#include <nlohmann/json.hpp>

#include "streamrl/model/transformer.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/task.h"

namespace streamrl::rl {

struct EvalConfig {
  int n = 256;               // held-out problems (the task's eval split)
  int max_new_tokens = 512;  // response cap; a capped response usually fails the verifier
  float temperature = 0;     // 0 = greedy
  float top_p = 1;           // with temperature > 0
  int top_k = 0;             // with temperature > 0; 0 = no limit
  uint64_t seed = 0;         // problem draw and sampling seed
  int batch_size = 64;       // prompts generated together
};

struct DifficultyStats {
  int n = 0;
  double accuracy = 0;
  double mean_length = 0;
};

struct EvalResult {
  int n = 0;
  double accuracy = 0;     // mean reward
  double mean_length = 0;  // response tokens
  double p90_length = 0;
  std::map<int, DifficultyStats> by_difficulty;
  double seconds = 0;

  nlohmann::json to_json() const;
};

// Prompts, stop tokens and decoding come from `prompts` (sequences.h).
EvalResult evaluate(model::CausalLM& model, const PromptEncoder& prompts, const tasks::Task& task,
                    const EvalConfig& config);

}  // namespace streamrl::rl
