#include "streamrl/rl/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "streamrl/engine/static_batch.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/tool_rollout.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"

namespace streamrl::rl {
namespace {

// Rewards and lengths of `per_problem` completions of each problem, in problem order; for a
// tool-using task also each completion's tool calls.
struct Completions {
  std::vector<std::vector<double>> reward, length, tool_calls;
};

struct Decoding {
  float temperature = 0;
  int per_problem = 1;
  int batch_prompts = 64;
};

engine::SamplingParams sampling(const PromptEncoder& prompts, const EvalConfig& config,
                                const Decoding& d) {
  engine::SamplingParams p;
  p.temperature = d.temperature;
  p.top_p = config.top_p;
  p.top_k = config.top_k;
  p.seed = config.seed;
  p.max_new_tokens = config.max_new_tokens;
  p.stop_token_ids = prompts.stop_ids();
  return p;
}

// A task with tools: multi-turn rollouts on a continuous-batching engine, each turn capped at
// max_new_tokens; a completion's length is its whole trajectory, tool results included.
Completions complete_with_tools(model::CausalLM& model, const PromptEncoder& prompts,
                                const tasks::Task& task,
                                const std::vector<tasks::Problem>& problems,
                                const EvalConfig& config, const Decoding& d) {
  const tokenizer::Tokenizer& tok = prompts.tokenizer();
  Completions out;
  out.reward.assign(problems.size(), {});
  out.length.assign(problems.size(), {});
  out.tool_calls.assign(problems.size(), {});
  const int batch = std::clamp(d.batch_prompts * d.per_problem, d.per_problem, 64);
  for (const ToolRollout& r : run_task_rollouts(model, prompts, task, problems, d.per_problem,
                                                sampling(prompts, config, d), batch)) {
    const size_t i = static_cast<size_t>(r.sample.request_id);
    out.reward[i].push_back(task.verify(problems[i], tok.decode(r.sample.output_ids)));
    out.length[i].push_back(static_cast<double>(r.sample.output_ids.size()));
    out.tool_calls[i].push_back(r.tool_calls);
  }
  return out;
}

Completions complete(model::CausalLM& model, const PromptEncoder& prompts, const tasks::Task& task,
                     const std::vector<tasks::Problem>& problems, const EvalConfig& config,
                     const Decoding& d) {
  if (!task.tools().empty()) return complete_with_tools(model, prompts, task, problems, config, d);
  const tokenizer::Tokenizer& tok = prompts.tokenizer();
  // Batch problems of similar visible size together: static batches then waste fewer steps on
  // rows that finished early.
  std::vector<size_t> order(problems.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return problems[a].visible_size < problems[b].visible_size;
  });
  Completions out;
  out.reward.assign(problems.size(), {});
  out.length.assign(problems.size(), {});
  const size_t batch = static_cast<size_t>(std::max(1, d.batch_prompts));
  for (size_t start = 0; start < order.size(); start += batch) {
    std::vector<engine::GenerateRequest> reqs;
    for (size_t k = start; k < std::min(order.size(), start + batch); ++k) {
      engine::GenerateRequest r;
      r.request_id = static_cast<int64_t>(order[k]);
      r.prompt_ids = prompts.prompt_ids(problems[order[k]]);
      r.n = d.per_problem;
      r.params = sampling(prompts, config, d);
      reqs.push_back(std::move(r));
    }
    for (const auto& s : engine::generate_static(model, reqs)) {
      const size_t i = s.request_id;
      out.reward[i].push_back(task.verify(problems[i], tok.decode(s.output_ids)));
      out.length[i].push_back(static_cast<double>(s.output_ids.size()));
    }
  }
  return out;
}

// Sampled pass@1 and pass@k over the problems `members` (indices into `rewards`).
SampledStats sampled_stats(const std::vector<std::vector<double>>& rewards,
                           const std::vector<size_t>& members, int samples) {
  SampledStats s;
  if (members.empty() || samples < 1) return s;
  std::vector<int> ks;
  for (int k = 1; k < samples; k *= 2) ks.push_back(k);
  ks.push_back(samples);
  for (size_t i : members) {
    int correct = 0;
    for (double r : rewards[i]) {
      s.pass_at_1 += r;
      correct += r >= 1.0;
    }
    for (int k : ks) s.pass_at_k[k] += pass_at_k(samples, correct, k);
  }
  s.pass_at_1 /= static_cast<double>(members.size()) * samples;
  for (auto& [k, v] : s.pass_at_k) v /= static_cast<double>(members.size());
  return s;
}

void add_sampled(const SampledStats& s, nlohmann::json* j) {
  (*j)["pass_at_1_sampled"] = s.pass_at_1;
  nlohmann::json by_k = nlohmann::json::object();
  for (const auto& [k, v] : s.pass_at_k) by_k[std::to_string(k)] = v;
  (*j)["pass_at_k"] = by_k;
}

int distinct(const std::vector<tasks::Problem>& problems, const std::vector<size_t>& members) {
  std::set<std::string> prompts;
  for (size_t i : members) prompts.insert(problems[i].prompt);
  return static_cast<int>(prompts.size());
}

}  // namespace

double pass_at_k(int n, int c, int k) {
  if (n - c < k) return 1.0;
  double all_fail = 1.0;  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
  for (int i = n - c + 1; i <= n; ++i) all_fail *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - all_fail;
}

nlohmann::json EvalResult::to_json() const {
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [d, s] : by_difficulty) {
    nlohmann::json j = {{"n", s.n},
                        {"distinct_prompts", s.distinct_prompts},
                        {"accuracy", s.accuracy},
                        {"mean_length", s.mean_length}};
    if (samples > 0) add_sampled(s.sampled, &j);
    by[std::to_string(d)] = j;
  }
  nlohmann::json j = {{"n", n},
                      {"distinct_prompts", distinct_prompts},
                      {"accuracy", accuracy},
                      {"mean_length", mean_length},
                      {"p90_length", p90_length},
                      {"by_difficulty", by},
                      {"seconds", seconds}};
  if (uses_tools) j["tool_calls_per_problem"] = tool_calls_per_problem;
  if (samples > 0) {
    j["samples"] = samples;
    j["sample_temperature"] = sample_temperature;
    add_sampled(sampled, &j);
  }
  return j;
}

std::vector<std::string> describe_change(const nlohmann::json& before,
                                         const nlohmann::json& after) {
  auto fig = [](const nlohmann::json& e, const char* key, const std::string& k = "") {
    const nlohmann::json* v = e.contains(key) ? &e[key] : nullptr;
    if (v && !k.empty()) v = v->contains(k) ? &(*v)[k] : nullptr;
    char buf[16];
    if (!v || !v->is_number()) return std::string("-");
    std::snprintf(buf, sizeof(buf), "%.3f", v->get<double>());
    return std::string(buf);
  };
  const std::string k = std::to_string(after.value("samples", 0));
  auto line = [&](const std::string& label, const nlohmann::json& b, const nlohmann::json& a) {
    std::string s = label + " (" + std::to_string(a.value("distinct_prompts", 0)) +
                    " distinct prompts): greedy " + fig(b, "accuracy") + " -> " +
                    fig(a, "accuracy");
    if (a.contains("pass_at_k")) {
      s += ", sampled pass@1 " + fig(b, "pass_at_1_sampled") + " -> " +
           fig(a, "pass_at_1_sampled") + ", pass@" + k + " " + fig(b, "pass_at_k", k) + " -> " +
           fig(a, "pass_at_k", k);
    }
    return s;
  };
  std::vector<std::string> lines = {line("held-out, all", before, after)};
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json by_difficulty = after.value("by_difficulty", none);
  for (const auto& [d, a] : by_difficulty.items()) {
    const nlohmann::json b = before.value("by_difficulty", none).value(d, none);
    lines.push_back(line("  difficulty " + d, b, a));
  }
  return lines;
}

EvalResult evaluate(model::CausalLM& model, const PromptEncoder& prompts, const tasks::Task& task,
                    const EvalConfig& config) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<tasks::Problem> problems;
  for (int i = 0; i < config.n; ++i) {
    problems.push_back(tasks::draw_problem(task, config.seed, tasks::Split::kEval, i));
  }
  const Completions main =
      complete(model, prompts, task, problems, config, {config.temperature, 1, config.batch_size});

  EvalResult r;
  r.n = static_cast<int>(problems.size());
  r.uses_tools = !task.tools().empty();
  std::vector<size_t> all;
  std::map<int, std::vector<size_t>> members;
  std::vector<double> lengths;
  for (size_t i = 0; i < problems.size(); ++i) {
    all.push_back(i);
    members[problems[i].difficulty].push_back(i);
    r.accuracy += main.reward[i][0];
    r.mean_length += main.length[i][0];
    if (!main.tool_calls.empty()) r.tool_calls_per_problem += main.tool_calls[i][0];
    lengths.push_back(main.length[i][0]);
    DifficultyStats& d = r.by_difficulty[problems[i].difficulty];
    d.n += 1;
    d.accuracy += main.reward[i][0];
    d.mean_length += main.length[i][0];
  }
  r.distinct_prompts = distinct(problems, all);
  if (r.n > 0) {
    r.accuracy /= r.n;
    r.mean_length /= r.n;
    r.tool_calls_per_problem /= r.n;
    r.p90_length = tasks::percentile(lengths, 0.9);
  }
  for (auto& [k, d] : r.by_difficulty) {
    d.accuracy /= d.n;
    d.mean_length /= d.n;
    d.distinct_prompts = distinct(problems, members[k]);
  }
  if (config.samples > 0) {
    // About twice the greedy pass's rows per batch: larger static batches decode faster per token
    // on the CPU, and a few prompts with many samples each still finish close together.
    const int batch_prompts = std::max(1, 2 * config.batch_size / config.samples);
    const Completions sampled =
        complete(model, prompts, task, problems, config,
                 {config.sample_temperature, config.samples, batch_prompts});
    r.samples = config.samples;
    r.sample_temperature = config.sample_temperature;
    r.sampled = sampled_stats(sampled.reward, all, config.samples);
    for (auto& [k, d] : r.by_difficulty) {
      d.sampled = sampled_stats(sampled.reward, members[k], config.samples);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace streamrl::rl
