#include "streamrl/rl/evaluate.h"

#include <algorithm>
#include <chrono>

#include "streamrl/engine/static_batch.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"

namespace streamrl::rl {

nlohmann::json EvalResult::to_json() const {
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [d, s] : by_difficulty) {
    by[std::to_string(d)] = {{"n", s.n}, {"accuracy", s.accuracy}, {"mean_length", s.mean_length}};
  }
  return {{"n", n},
          {"accuracy", accuracy},
          {"mean_length", mean_length},
          {"p90_length", p90_length},
          {"by_difficulty", by},
          {"seconds", seconds}};
}

EvalResult evaluate(model::CausalLM& model, const PromptEncoder& prompts, const tasks::Task& task,
                    const EvalConfig& config) {
  const tokenizer::Tokenizer& tok = prompts.tokenizer();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<tasks::Problem> problems;
  for (int i = 0; i < config.n; ++i) {
    problems.push_back(tasks::draw_problem(task, config.seed, tasks::Split::kEval, i));
  }
  // Batch problems of similar visible size together: static batches then waste fewer steps on
  // rows that finished early.
  std::vector<size_t> order(problems.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return problems[a].visible_size < problems[b].visible_size;
  });

  std::vector<double> reward(problems.size()), length(problems.size());
  for (size_t start = 0; start < order.size(); start += config.batch_size) {
    std::vector<engine::GenerateRequest> reqs;
    for (size_t k = start; k < std::min(order.size(), start + config.batch_size); ++k) {
      engine::GenerateRequest r;
      r.request_id = static_cast<int64_t>(order[k]);
      r.prompt_ids = prompts.prompt_ids(problems[order[k]]);
      r.params.temperature = config.temperature;
      r.params.top_p = config.top_p;
      r.params.top_k = config.top_k;
      r.params.seed = config.seed;
      r.params.max_new_tokens = config.max_new_tokens;
      r.params.stop_token_ids = prompts.stop_ids();
      reqs.push_back(std::move(r));
    }
    for (const auto& s : engine::generate_static(model, reqs)) {
      const size_t i = s.request_id;
      reward[i] = task.verify(problems[i], tok.decode(s.output_ids));
      length[i] = s.output_ids.size();
    }
  }

  EvalResult r;
  r.n = static_cast<int>(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) {
    r.accuracy += reward[i];
    r.mean_length += length[i];
    DifficultyStats& d = r.by_difficulty[problems[i].difficulty];
    d.n += 1;
    d.accuracy += reward[i];
    d.mean_length += length[i];
  }
  if (r.n > 0) {
    r.accuracy /= r.n;
    r.mean_length /= r.n;
    r.p90_length = tasks::percentile(length, 0.9);
  }
  for (auto& [k, d] : r.by_difficulty) {
    d.accuracy /= d.n;
    d.mean_length /= d.n;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace streamrl::rl
