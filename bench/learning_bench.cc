#include "learning_bench.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "streamrl/core/clock.h"
#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/sft.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

namespace fs = std::filesystem;
using core::Clock;

constexpr double kGoalGain = 0.15;     // absolute held-out greedy accuracy points (issue #15)
constexpr double kGoalMinutes = 15.0;  // the main job, SFT included, on this 2-core machine
constexpr int kPassK = 8;              // pass@8 of the SFT policy: the bar for pass@1 after RL
constexpr int kEasyMaxDifficulty = 1;  // "difficulties 0-1" of the pass@k goal

// The SFT warm start of configs/sft_sum.yaml, trained now when missing (not in quick mode, where
// minutes of SFT would defeat the purpose).
nlohmann::json ensure_sft_checkpoint(const fs::path& ckpt, int threads, bool quick) {
  if (fs::exists(ckpt / "model.safetensors")) return {{"trained_now", false}};
  const std::string command = "streamrl sft --config configs/sft_sum.yaml";
  if (quick) throw InputError(ckpt.string() + " is missing; create it with `" + command + "`");
  const auto t0 = Clock::now();
  core::Config cfg =
      core::Config::from_file(source_path("configs/sft_sum.yaml").string(),
                              {"run.dir=" + source_path("runs").string(),
                               "model.config=" + source_path("configs/model/tiny.json").string(),
                               "run.threads=" + std::to_string(threads)});
  rl::run_sft(rl::SftConfig::from_config(cfg), cfg.resolved_yaml());
  if (!fs::exists(ckpt / "model.safetensors")) {
    throw RuntimeFailure("SFT finished but " + ckpt.string() + " is missing; run `" + command +
                         "`");
  }
  return {{"trained_now", true}, {"minutes", core::seconds_since(t0) / 60.0}};
}

// Held-out evaluation of the checkpoint in `dir` as one curve point; the whole EvalResult when
// `full` (the before and after points, with the sampled pass).
nlohmann::json eval_point(int64_t iteration, const fs::path& dir, const tasks::Task& task,
                          rl::EvalConfig config, bool sampled, nlohmann::json* full) {
  auto tok = tokenizer::load_tokenizer(dir);
  const rl::PromptEncoder prompts = rl::PromptEncoder::for_task(*tok, dir, task);
  model::CausalLM lm = model::load_model(dir);
  torch::NoGradGuard no_grad;
  if (!sampled) config.samples = 0;
  const rl::EvalResult e = rl::evaluate(lm, prompts, task, config);
  if (full) *full = e.to_json();
  nlohmann::json by_difficulty = nlohmann::json::object();
  for (const auto& [d, stats] : e.by_difficulty) by_difficulty[std::to_string(d)] = stats.accuracy;
  return {{"iteration", iteration},
          {"accuracy", e.accuracy},
          {"mean_length", e.mean_length},
          {"accuracy_by_difficulty", by_difficulty}};
}

// Mean training reward, verifier accuracy and response length of the iterations in (from, to].
void add_train_stats(const fs::path& metrics_path, int64_t from, int64_t to,
                     nlohmann::json* point) {
  std::ifstream in(metrics_path);
  std::string line;
  double reward = 0, accuracy = 0, length = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json rec = nlohmann::json::parse(line);
    const int64_t step = rec.value("step", int64_t{0});
    if (!rec.contains("reward_mean") || step <= from || step > to) continue;
    reward += rec["reward_mean"].get<double>();
    accuracy += rec.value("accuracy", 0.0);
    length += rec.value("response_length", nlohmann::json::object()).value("mean", 0.0);
    ++n;
  }
  if (n == 0) return;
  (*point)["train_reward_mean"] = reward / n;
  (*point)["train_accuracy"] = accuracy / n;
  (*point)["train_length_mean"] = length / n;
}

// `key` of an evaluation ("pass_at_1_sampled", or "pass_at_k" with `k`) over the difficulties
// up to `max_d`, weighted by their problem counts.
double pooled(const nlohmann::json& eval, int max_d, const std::string& key,
              const std::string& k = "") {
  double sum = 0, n = 0;
  for (const auto& [d, s] : eval["by_difficulty"].items()) {
    if (std::stoi(d) > max_d) continue;
    const double v = k.empty() ? s[key].get<double>() : s[key][k].get<double>();
    sum += v * s["n"].get<double>();
    n += s["n"].get<double>();
  }
  return n > 0 ? sum / n : 0.0;
}

// Sampled pass@1, pass@k (k = the evaluation's samples) and distinct prompts per difficulty of
// one evaluation.
nlohmann::json pass_table(const nlohmann::json& eval) {
  const std::string k = std::to_string(eval["samples"].get<int>());  // kPassK, 2 when quick
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [d, s] : eval["by_difficulty"].items()) {
    by[d] = {{"greedy", s["accuracy"]},
             {"pass_at_1", s["pass_at_1_sampled"]},
             {"pass_at_" + k, s["pass_at_k"][k]},
             {"distinct_prompts", s["distinct_prompts"]},
             {"n", s["n"]}};
  }
  return {{"all", eval["pass_at_1_sampled"]},
          {"all_pass_at_" + k, eval["pass_at_k"][k]},
          {"easy", pooled(eval, kEasyMaxDifficulty, "pass_at_1_sampled")},
          {"easy_pass_at_" + k, pooled(eval, kEasyMaxDifficulty, "pass_at_k", k)},
          {"by_difficulty", by}};
}

}  // namespace

nlohmann::json run_learning(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : 2;
  core::apply_core_budget(threads);
  const std::string config_path = source_path("configs/rl_sum.yaml").string();
  // A relative checkpoint path in the config is read against the source tree, so the bench runs
  // from any directory.
  std::string init_from =
      core::Config::from_file(config_path).section("policy").require<std::string>("init_from");
  if (fs::path(init_from).is_relative()) init_from = source_path(init_from).string();
  const nlohmann::json sft = ensure_sft_checkpoint(init_from, 1, options.quick);

  const fs::path root =
      fs::temp_directory_path() / ("streamrl_bench_learning_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  // The main job's run (scripts/main: async mode, generator and trainer on a core each), in a
  // temporary directory; its own evaluations are replaced by the bench's below.
  std::vector<std::string> overrides = {"mode=async",
                                        "run.name=rl",
                                        "run.dir=" + root.string(),
                                        "run.resume=false",
                                        "policy.init_from=" + init_from,
                                        "eval.n=0",
                                        "checkpoint.keep=0"};
  if (options.quick) {
    for (const char* o :
         {"train.iterations=3", "rollout.prompts_per_iteration=4", "rollout.group_size=4"}) {
      overrides.push_back(o);
    }
  }
  for (const auto& o : options.overrides) overrides.push_back(o);
  // eval.* of the config and the user's overrides drive the bench's own evaluations.
  rl::EvalConfig eval;
  int eval_every = 0;
  rl::read_eval(core::Config::from_file(config_path, options.overrides).section("eval"),
                &eval_every, &eval);
  if (options.quick) eval.n = 16, eval_every = 2;
  eval.samples = options.quick ? 2 : kPassK;
  core::Config cfg = core::Config::from_file(config_path, overrides);
  rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);
  if (eval_every <= 0) eval_every = rc.iterations;
  overrides.push_back("checkpoint.every=" + std::to_string(eval_every));
  cfg = core::Config::from_file(config_path, overrides);
  rc = rl::RlRunConfig::from_config(cfg);

  const tasks::Task& task = tasks::get_task(rc.data.task);
  nlohmann::json curve = nlohmann::json::array(), before_eval, after_eval, run;
  double rl_minutes = 0;
  const auto t0 = Clock::now();
  try {
    curve.push_back(eval_point(0, init_from, task, eval, true, &before_eval));
    const auto r0 = Clock::now();
    run = rl::run_rl(rc, cfg.resolved_yaml());
    rl_minutes = core::seconds_since(r0) / 60.0;
    const fs::path run_dir = rc.run.dir();
    for (int64_t it = eval_every; it < rc.iterations; it += eval_every) {
      curve.push_back(eval_point(it, run_dir / "checkpoints" / ("step_" + std::to_string(it)), task,
                                 eval, false, nullptr));
    }
    curve.push_back(eval_point(rc.iterations, run_dir / "final", task, eval, true, &after_eval));
    int64_t previous = 0;
    for (auto& point : curve) {
      const int64_t it = point["iteration"].get<int64_t>();
      if (it > 0) add_train_stats(run_dir / "metrics.jsonl", previous, it, &point);
      previous = it;
    }
  } catch (...) {
    fs::remove_all(root);
    throw;
  }
  const double minutes = core::seconds_since(t0) / 60.0;
  fs::remove_all(root);

  const double before = curve.front()["accuracy"].get<double>();
  const double after = curve.back()["accuracy"].get<double>();
  const nlohmann::json pass_before = pass_table(before_eval);
  const nlohmann::json pass_after = pass_table(after_eval);
  const std::string k = std::to_string(eval.samples);
  const double easy_bar = pass_before["easy_pass_at_" + k].get<double>();
  const double easy_after = pass_after["easy"].get<double>();
  return {
      {"task", task.name()},
      {"config", "configs/rl_sum.yaml"},
      {"overrides", options.overrides},
      {"init_from", init_from},
      {"sft", sft},
      {"threads", threads},
      {"quick", options.quick},
      {"settings",
       {{"mode", core::mode_name(rc.mode)},
        {"reward", rc.data.reward},
        {"max_difficulty", rc.data.max_difficulty},
        {"curriculum", rc.data.curriculum.enabled ? "pass_rate" : "none"},
        {"dynamic_sampling", rc.dynamic_sampling.enabled},
        {"max_refills", rc.dynamic_sampling.max_refills},
        {"overlong_buffer", rc.overlong.buffer},
        {"ratio", std::string(rl::name(rc.loss.ratio))},
        {"iterations", rc.iterations},
        {"prompts_per_iteration", rc.prompts_per_iteration},
        {"group_size", rc.group_size},
        {"temperature", rc.temperature},
        {"lr", rc.optim.lr},
        {"warmup_steps", rc.optim.warmup_steps},
        {"eps_high", rc.loss.clip.eps_high},
        {"loss_agg", std::string(rl::name(rc.loss.loss_agg))},
        {"kl_coef", rc.loss.kl.coef},
        {"eval_n", eval.n},
        {"eval_samples", eval.samples}}},
      {"accuracy_before", before},
      {"accuracy_after", after},
      {"gain", after - before},
      {"pass_at_1", {{"before", pass_before["all"]}, {"after", pass_after["all"]}}},
      {"pass_at_8",
       {{"before", pass_before["all_pass_at_" + k]}, {"after", pass_after["all_pass_at_" + k]}}},
      {"pass_at_k_by_difficulty", {{"before", pass_before}, {"after", pass_after}}},
      {"distinct_prompts", before_eval["distinct_prompts"]},
      {"minutes", minutes},
      {"rl_minutes", rl_minutes},
      {"warnings", run.value("warnings", nlohmann::json::array())},
      {"goal",
       {{"min_gain", kGoalGain},
        {"easy_pass_at_1_after", easy_after},
        {"easy_sft_pass_at_8", easy_bar},
        {"max_minutes", kGoalMinutes}}},
      {"goal_met", after - before >= kGoalGain && easy_after >= easy_bar},
      {"curve", curve},
  };
}

}  // namespace streamrl::bench
