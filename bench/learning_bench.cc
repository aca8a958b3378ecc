#include "learning_bench.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/sft.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kGoalGain = 0.10;     // absolute held-out accuracy points (issue #5)
constexpr double kGoalMinutes = 15.0;  // on this 2-core machine, one thread

// The training curriculum. Measured on the SFT checkpoint at temperature 1 (8 samples for each of
// 20-40 train prompts per difficulty): a correct final answer came with a correct scratchpad in
// 97% of cases at difficulty 0, but only 10% at difficulty 1 and 0% at difficulty 2, because the
// model miscopies operands after the first. With the task's final-answer reward, GRPO on the full
// distribution therefore mostly reinforces lucky guesses; it drifted down (0.297 -> 0.289 greedy
// after 60 iterations at lr 5e-5). The bench trains on the difficulties whose step-checked pass
// rate is between 0 and 1, with the step-checked reward: the completion must equal the unique
// correct scratchpad. Held-out evaluation stays on the whole task with its own verifier.
constexpr int kCurriculumMaxDifficulty = 0;
constexpr int kCurriculumDraws = 20000;  // train-split draws filtered by difficulty

fs::path source_path(const std::string& relative) {
  return fs::path(STREAMRL_SOURCE_DIR) / relative;
}

double minutes_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count() / 60.0;
}

// The SFT warm start of configs/sft_sum.yaml, trained now when missing (not in quick mode, where
// 4-5 minutes of SFT would defeat the purpose).
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
  return {{"trained_now", true}, {"minutes", minutes_since(t0)}};
}

// Train-split problems of `task` up to the curriculum's difficulty, as a JSONL dataset whose
// answer is the whole demonstration (for the "exact" verifier). Returns the number of records.
int write_curriculum(const tasks::Task& task, uint64_t seed, const fs::path& path) {
  std::ofstream out(path);
  int records = 0;
  for (int i = 0; i < kCurriculumDraws; ++i) {
    tasks::Problem p = tasks::draw_problem(task, seed, tasks::Split::kTrain, i);
    if (p.difficulty > kCurriculumMaxDifficulty) continue;
    out << nlohmann::json{{"prompt", p.prompt},
                          {"answer", p.demonstration},
                          {"difficulty", p.difficulty}}
               .dump()
        << "\n";
    ++records;
  }
  if (!out) throw RuntimeFailure("cannot write " + path.string());
  return records;
}

// Held-out greedy evaluation of the checkpoint in `dir` on `task`, as one curve point.
nlohmann::json eval_point(int64_t iteration, const fs::path& dir, const tasks::Task& task,
                          const rl::EvalConfig& config) {
  auto tok = tokenizer::load_tokenizer(dir);
  const rl::PromptEncoder prompts = rl::PromptEncoder::for_task(*tok, dir, task);
  model::CausalLM lm = model::load_model(dir);
  torch::NoGradGuard no_grad;
  const rl::EvalResult e = rl::evaluate(lm, prompts, task, config);
  nlohmann::json by_difficulty = nlohmann::json::object();
  for (const auto& [d, stats] : e.by_difficulty) by_difficulty[std::to_string(d)] = stats.accuracy;
  return {{"iteration", iteration},
          {"accuracy", e.accuracy},
          {"mean_length", e.mean_length},
          {"accuracy_by_difficulty", by_difficulty}};
}

// Mean step-checked training reward and response length of the iterations in (from, to].
void add_train_stats(const fs::path& metrics_path, int64_t from, int64_t to,
                     nlohmann::json* point) {
  std::ifstream in(metrics_path);
  std::string line;
  double reward = 0, length = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json rec = nlohmann::json::parse(line);
    const int64_t step = rec.value("step", int64_t{0});
    if (!rec.contains("reward_mean") || step <= from || step > to) continue;
    reward += rec["reward_mean"].get<double>();
    length += rec.value("response_length", nlohmann::json::object()).value("mean", 0.0);
    ++n;
  }
  if (n == 0) return;
  (*point)["train_reward_mean"] = reward / n;
  (*point)["train_length_mean"] = length / n;
}

}  // namespace

nlohmann::json run_learning(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : 1;
  core::apply_core_budget(threads);
  const std::string config_path = source_path("configs/rl_sum.yaml").string();
  const rl::RlRunConfig recommended = rl::RlRunConfig::from_config(core::Config::from_file(
      config_path, {"policy.init_from=" + source_path("runs/sft_sum/final").string()}));
  // A relative checkpoint path in the config is read against the source tree, so the bench runs
  // from any directory.
  std::string init_from =
      core::Config::from_file(config_path).section("policy").require<std::string>("init_from");
  if (fs::path(init_from).is_relative()) init_from = source_path(init_from).string();
  const nlohmann::json sft = ensure_sft_checkpoint(init_from, threads, options.quick);

  const tasks::Task& task = tasks::get_task(tasks::default_task_name());
  rl::EvalConfig eval = recommended.eval;
  int eval_every = recommended.eval_every > 0 ? recommended.eval_every : recommended.iterations;
  if (options.quick) {
    eval.n = 16;
    eval_every = 2;
  }
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_bench_learning_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path curriculum = root / "curriculum.jsonl";
  const int records = write_curriculum(task, recommended.run.seed, curriculum);

  std::vector<std::string> overrides = {"run.name=rl",
                                        "run.dir=" + root.string(),
                                        "run.resume=false",
                                        "run.threads=" + std::to_string(threads),
                                        "policy.init_from=" + init_from,
                                        "data.jsonl=" + curriculum.string(),
                                        "data.verifier=exact",
                                        "eval.n=0",  // evaluated here on the whole task instead
                                        "checkpoint.every=" + std::to_string(eval_every),
                                        "checkpoint.keep=0"};
  if (options.quick) {
    for (const char* o :
         {"train.iterations=3", "rollout.prompts_per_iteration=4", "rollout.group_size=4"}) {
      overrides.push_back(o);
    }
  }
  core::Config cfg = core::Config::from_file(config_path, overrides);
  const rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);

  nlohmann::json curve = nlohmann::json::array();
  const auto t0 = Clock::now();
  try {
    curve.push_back(eval_point(0, init_from, task, eval));
    rl::run_rl(rc, cfg.resolved_yaml());
    const fs::path run_dir = rc.run.dir();
    for (int64_t it = eval_every; it < rc.iterations; it += eval_every) {
      curve.push_back(
          eval_point(it, run_dir / "checkpoints" / ("step_" + std::to_string(it)), task, eval));
    }
    curve.push_back(eval_point(rc.iterations, run_dir / "final", task, eval));
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
  const double minutes = minutes_since(t0);
  fs::remove_all(root);

  const double before = curve.front()["accuracy"].get<double>();
  const double after = curve.back()["accuracy"].get<double>();
  return {
      {"task", task.name()},
      {"config", "configs/rl_sum.yaml"},
      {"init_from", init_from},
      {"sft", sft},
      {"threads", threads},
      {"quick", options.quick},
      {"curriculum",
       {{"max_difficulty", kCurriculumMaxDifficulty},
        {"records", records},
        {"reward", "step-checked: completion == demonstration (verifier exact)"}}},
      {"settings",
       {{"iterations", rc.iterations},
        {"prompts_per_iteration", rc.prompts_per_iteration},
        {"group_size", rc.group_size},
        {"temperature", rc.temperature},
        {"lr", rc.optim.lr},
        {"warmup_steps", rc.optim.warmup_steps},
        {"loss_agg", std::string(rl::name(rc.loss.loss_agg))},
        {"kl_coef", rc.loss.kl.coef},
        {"eval_n", eval.n}}},
      {"accuracy_before", before},
      {"accuracy_after", after},
      {"gain", after - before},
      {"minutes", minutes},
      {"goal", {{"min_gain", kGoalGain}, {"max_minutes", kGoalMinutes}}},
      {"goal_met", after - before >= kGoalGain && minutes <= kGoalMinutes},
      {"curve", curve},
  };
}

}  // namespace streamrl::bench
