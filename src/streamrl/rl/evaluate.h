// Held-out evaluation of a policy on a task: greedy accuracy, response lengths, and optionally
// sampled pass@1 (mean@k) and pass@k (unbiased estimator), overall and by difficulty, each with
// the number of distinct prompts behind it. Used by `streamrl eval`, periodic SFT eval, and the
// before/after figures of RL runs.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/model/transformer.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/task.h"

namespace streamrl::rl {

struct EvalConfig {
  int n = 256;               // held-out problems (the task's eval split)
  int max_new_tokens = 512;  // response cap; a capped response usually fails the verifier
  float temperature = 0;     // of the main pass; 0 = greedy
  float top_p = 1;           // with temperature > 0
  int top_k = 0;             // with temperature > 0; 0 = no limit
  uint64_t seed = 0;         // problem draw and sampling seed
  int batch_size = 64;       // prompts generated together
  // A second, sampled pass: `samples` completions per problem at `sample_temperature` give the
  // sampled pass@1 (mean@k) and pass@k for k = 1, 2, 4, ... up to `samples`. 0 = no such pass.
  int samples = 0;
  float sample_temperature = 1.0f;
};

// pass@k of one problem from n samples of which c passed: the unbiased estimator
// 1 - C(n-c, k) / C(n, k) (Chen et al. 2021), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) so
// that no binomial overflows. REQUIRES 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int n, int c, int k);

// Sampled-pass statistics of a set of problems.
struct SampledStats {
  double pass_at_1 = 0;             // mean reward over all samples (mean@k)
  std::map<int, double> pass_at_k;  // k -> mean over problems of pass_at_k(samples, c, k)
};

struct DifficultyStats {
  int n = 0;                 // problems drawn (with repeats)
  int distinct_prompts = 0;  // different prompts among them: what the figures really rest on
  double accuracy = 0;
  double mean_length = 0;
  SampledStats sampled;  // when EvalConfig::samples > 0
};

struct EvalResult {
  int n = 0;
  int distinct_prompts = 0;
  double accuracy = 0;     // mean reward of the main (greedy by default) pass
  double mean_length = 0;  // response tokens of the main pass
  double p90_length = 0;
  // Tasks with tools: main-pass tool calls per problem (lengths then count whole trajectories).
  bool uses_tools = false;
  double tool_calls_per_problem = 0;
  int samples = 0;  // per problem in the sampled pass; 0 when there was none
  float sample_temperature = 0;
  SampledStats sampled;
  std::map<int, DifficultyStats> by_difficulty;
  double seconds = 0;

  // {"n", "distinct_prompts", "accuracy", ..., "by_difficulty": {"0": {...}}}; with tools also
  // "tool_calls_per_problem"; with a sampled
  // pass also "samples", "sample_temperature", "pass_at_1_sampled" and "pass_at_k": {"1": ...}
  // at the top level and in each difficulty.
  nlohmann::json to_json() const;
};

// Human-readable lines comparing two EvalResult::to_json() objects (before and after training):
// greedy accuracy, and with a sampled pass sampled pass@1 and pass@k, overall and by difficulty
// with the distinct prompts behind each row.
std::vector<std::string> describe_change(const nlohmann::json& before, const nlohmann::json& after);

// Prompts, stop tokens and decoding come from `prompts` (sequences.h).
EvalResult evaluate(model::CausalLM& model, const PromptEncoder& prompts, const tasks::Task& task,
                    const EvalConfig& config);

}  // namespace streamrl::rl
