#include "emulator_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "rl_modes_bench.h"
#include "rounds.h"
#include "streamrl/core/clock.h"
#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/packing.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/profile.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/transformer.h"
#include "streamrl/planner/validation.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/policy_update.h"
#include "streamrl/rl/rl_run_config.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/task.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

namespace fs = std::filesystem;
using core::Clock;
using nlohmann::json;

// The bench's output: the last line that parses as a JSON object (`--json` puts it last).
json read_measured(const std::string& path) {
  std::istringstream in(core::read_file(path));
  json found;
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) found = std::move(j);
  }
  if (found.is_null()) {
    json whole = json::parse(core::read_file(path), nullptr, false);
    if (!whole.is_object()) throw InputError("'" + path + "' holds no JSON object");
    found = std::move(whole);
  }
  return found;
}

// `bench rl_modes` reports timings only. The sizes of the measured runs are in each run's resolved
// config.yaml under runs_dir (else in the workload's config file, which may have changed since),
// the per-iteration lengths and sample counts in each run's metrics.jsonl. Fills what the JSON
// leaves out.
void add_run_details(json& j) {
  json& w = j["workload"];
  const fs::path runs = j.contains("runs_dir") ? j["runs_dir"].get<std::string>() : "";
  fs::path cfg_path;
  if (!runs.empty() && j.contains("modes")) {
    for (const auto& [name, m] : j["modes"].items()) {
      if (fs::exists(runs / name / "config.yaml")) {
        cfg_path = runs / name / "config.yaml";
        break;
      }
    }
  }
  if (cfg_path.empty() && w.contains("config")) {
    cfg_path = w["config"].get<std::string>();
    if (!fs::exists(cfg_path)) cfg_path = fs::path(STREAMRL_SOURCE_DIR) / cfg_path;
  }
  if (!cfg_path.empty()) {
    const core::Config cfg = core::Config::from_file(cfg_path.string());
    auto fill = [&](const char* key, const core::Config& section, const char* field) {
      if (w.contains(key) || !section.has(field)) return;
      int v = 0;
      section.get(field, v);
      w[key] = v;
    };
    fill("prompts_per_iteration", cfg.section("rollout"), "prompts_per_iteration");
    fill("group_size", cfg.section("rollout"), "group_size");
    fill("max_batch_size", cfg.section("rollout"), "max_batch_size");
    fill("micro_batch_tokens", cfg.section("train"), "micro_batch_tokens");
    fill("max_difficulty", cfg.section("data"), "max_difficulty");
    if (!w.contains("task_name") && cfg.section("data").has("task")) {
      std::string task;
      cfg.section("data").get("task", task);
      w["task_name"] = task;
    }
  }
  if (runs.empty() || !j.contains("modes")) return;
  for (auto& [name, m] : j["modes"].items()) {
    // The batch this mode generated at (the colocated engine's, or the SGS instances').
    if (const fs::path cfg = runs / name / "config.yaml";
        fs::exists(cfg) && m.is_object() && !m.contains("max_batch_size")) {
      m["max_batch_size"] =
          rl::RlRunConfig::from_config(core::Config::from_file(cfg.string())).generation_batch();
    }
    const fs::path metrics = runs / name / "metrics.jsonl";
    if (!fs::exists(metrics) || m.contains("lengths")) continue;
    std::istringstream in(core::read_file(metrics));
    json per = json::array();
    for (std::string line; std::getline(in, line);) {
      json r = json::parse(line, nullptr, false);
      if (r.is_object() && r.contains("stage_seconds") && r.contains("response_length")) {
        json st = r["response_length"];
        if (r.contains("samples")) st["samples"] = r["samples"];
        if (r.contains("skipped_zero_advantage")) st["skipped"] = r["skipped_zero_advantage"];
        per.push_back(st);
      }
    }
    if (!per.empty()) m["response_length_per_iteration"] = per;
  }
}

fs::path model_dir(const planner::MeasuredRun& run) {
  if (const char* env = std::getenv("STREAMRL_EMULATOR_CKPT"); env && *env) return env;
  if (!run.checkpoint.empty() && fs::exists(fs::path(run.checkpoint) / "config.json")) {
    return run.checkpoint;
  }
  if (fs::exists("runs/sft_sum/final/config.json")) return "runs/sft_sum/final";
  return {};
}

// Mean prompt tokens of the run's training prompts under the checkpoint's tokenizer (BOS + text),
// drawn as the run draws them (the first easy-enough candidate under data.max_difficulty).
double task_prompt_tokens(const fs::path& dir, const std::string& task_name, int max_difficulty) {
  auto tok = !dir.empty() && fs::exists(dir / "tokenizer.json")
                 ? tokenizer::load_tokenizer(dir / "tokenizer.json")
                 : tokenizer::make_tokenizer("char");
  const tasks::Task& task =
      tasks::get_task(task_name.empty() ? tasks::default_task_name() : task_name);
  double sum = 0;
  const int n = 64;
  for (int i = 0; i < n; ++i) {
    tasks::Problem p = tasks::draw_problem(task, 0, tasks::Split::kTrain, i);
    constexpr int kCandidates = 256;  // as rl_run's draw_training_problem
    for (int a = 0; max_difficulty >= 0 && a < kCandidates; ++a) {
      p = tasks::draw_problem(task, 0, tasks::Split::kTrain, int64_t{i} * kCandidates + a);
      if (p.difficulty <= max_difficulty) break;
    }
    sum += 1 + tok->encode(p.prompt).size();
  }
  return sum / n;
}

// Training speed (padded tokens/s) at the current core budget, measured on the trainer's own code:
// an rl::PolicyStep (the loss of configs/rl_sum.yaml: no KL, no entropy term, so the entropy it
// logs carries no gradient) over sequences of the measured lengths with advantages +-1, packed as
// the trainer packs them (`budget` padded tokens per micro-batch), then its AdamW step with
// gradient clipping. Tokens are counted padded, as the emulator charges them. One warm-up pass
// (first-call allocations), then the median of `reps` passes.
planner::TrainerModel measure_trainer(model::CausalLM& lm, const std::vector<int>& seq_lens,
                                      int prompt_len, int64_t budget, int reps = 3) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, lm->config().vocab_size - 1);
  std::vector<rl::ScoredSample> batch;
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    const int prompt = std::clamp(prompt_len, 1, seq_lens[i] - 1);
    rl::ScoredSample s;
    for (int t = 0; t < prompt; ++t) s.sample.prompt_ids.push_back(token(rng));
    for (int t = prompt; t < seq_lens[i]; ++t) s.sample.output_ids.push_back(token(rng));
    s.sample.logprobs.assign(s.sample.output_ids.size(), -1.0f);
    s.advantage = i % 2 ? 1.0 : -1.0;
    lengths.push_back(seq_lens[i]);
    batch.push_back(std::move(s));
  }
  const int64_t tokens = core::padded_tokens(lengths, core::pack_by_token_budget(lengths, budget));
  rl::OptimConfig oc;
  oc.lr = 1e-6;
  auto opt = rl::make_adamw(*lm, oc);
  rl::UpdateConfig uc;
  uc.micro_batch_tokens = static_cast<int>(budget);
  std::vector<double> fwd_bwd, step;
  for (int r = 0; r <= reps; ++r) {
    rl::PolicyStep ps(lm, *opt, rl::RlLossConfig{}, uc);
    ps.add(batch, /*eager=*/false);
    auto t0 = Clock::now();
    ps.flush();
    const double fb = core::seconds_since(t0);
    t0 = Clock::now();
    ps.finish(oc.lr, oc.grad_clip);
    if (r == 0) continue;  // warm-up
    fwd_bwd.push_back(fb);
    step.push_back(core::seconds_since(t0));
  }
  std::sort(fwd_bwd.begin(), fwd_bwd.end());
  std::sort(step.begin(), step.end());
  planner::TrainerModel tr;
  tr.step_overhead_s = step[step.size() / 2];
  tr.tokens_per_s = tokens / fwd_bwd[fwd_bwd.size() / 2];
  tr.micro_batch_tokens = budget;
  tr.padded = true;
  return tr;
}

// CPU interference of generation and training on one thread each (stream and async run them at
// the same time on this machine's cores): the decode step time and the training speed measured
// alone and while the other runs in a second thread on its own model copy. Returns {generation
// slowdown, training slowdown}; both measured, nothing fitted.
std::pair<double, double> measure_interference(const model::ModelConfig& mc,
                                               const std::vector<int>& seqs, int prompt,
                                               int64_t budget, const engine::ProfileConfig& pc,
                                               json& inputs) {
  model::CausalLM gen_lm(mc, 0), train_lm(mc, 1);
  core::apply_core_budget(1);
  auto decode_step = [&] {
    const auto p = planner::PtlTable::from_json(engine::measure_profile(gen_lm, pc).to_json());
    return p.step_seconds(pc.batch_sizes.back(), pc.contexts[pc.contexts.size() / 2]);
  };
  const double gen_alone = decode_step();
  const double train_alone = measure_trainer(train_lm, seqs, prompt, budget).tokens_per_s;
  std::atomic<bool> stop{false};
  auto background = [&](bool train) {
    return std::thread([&, train] {
      core::apply_core_budget(1);  // OpenMP's setting is per thread
      while (!stop.load()) {
        if (train) {
          measure_trainer(train_lm, seqs, prompt, budget, 1);
        } else {
          decode_step();
        }
      }
    });
  };
  std::thread bg = background(/*train=*/true);
  const double gen_busy = decode_step();
  stop = true;
  bg.join();
  stop = false;
  bg = background(/*train=*/false);
  const double train_busy = measure_trainer(train_lm, seqs, prompt, budget).tokens_per_s;
  stop = true;
  bg.join();
  const double kg = std::max(1.0, gen_busy / gen_alone);
  const double kt = std::max(1.0, train_alone / train_busy);
  inputs["interference"] = {{"decode_step_ms_alone", 1e3 * gen_alone},
                            {"decode_step_ms_with_training", 1e3 * gen_busy},
                            {"train_tokens_per_s_alone", train_alone},
                            {"train_tokens_per_s_with_decoding", train_busy},
                            {"gen_slowdown", kg},
                            {"train_slowdown", kt},
                            {"note",
                             "measured here (each stage on one thread, the other running in a "
                             "second thread); slowdowns below 1 are clamped to 1"}};
  return {kg, kt};
}

// In-process weight channel: one copy of every parameter.
double measure_weight_copy(model::CausalLM& lm) {
  torch::NoGradGuard no_grad;
  std::vector<double> times;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    for (const auto& p : lm->parameters()) p.clone();
    times.push_back(core::seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

// Profiles this machine for the measured run and returns the emulator's prediction of every mode
// beside the measurement. `label` names the measurement's source in the result.
json predict(json measured, const BenchOptions& options, const std::string& label) {
  add_run_details(measured);
  planner::MeasuredRun run = planner::MeasuredRun::from_json(measured);
  const fs::path dir = model_dir(run);
  const std::string config_path =
      dir.empty() ? std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json"
                  : (dir / "config.json").string();
  model::CausalLM lm(model::load_model_config(config_path), 0);
  if (run.prompt_tokens_mean <= 0) {
    const json& w = measured["workload"];
    run.prompt_tokens_mean = task_prompt_tokens(
        dir, w.value("task_name", w.value("task", std::string())), w.value("max_difficulty", -1));
  }

  // Training sequences (prompt + output) of the first measured batch; fewer with --quick.
  std::vector<int> seqs;
  const auto& lens = run.lengths.begin()->second.front();
  for (int l : lens) seqs.push_back(static_cast<int>(run.prompt_tokens_mean) + l);
  if (options.quick && seqs.size() > 64) seqs.resize(64);
  int max_len = 0;
  for (int l : lens) max_len = std::max(max_len, l);

  engine::ProfileConfig pc;
  pc.batch_sizes.clear();
  for (int b = 1; b < run.max_batch; b *= 2) pc.batch_sizes.push_back(b);
  pc.batch_sizes.push_back(run.max_batch);
  // The dedicated modes' batch (stream and async overlap at it, so interference is measured there).
  const int gen_batch = run.dedicated_batch();
  if (std::find(pc.batch_sizes.begin(), pc.batch_sizes.end(), gen_batch) == pc.batch_sizes.end()) {
    pc.batch_sizes.push_back(gen_batch);
    std::sort(pc.batch_sizes.begin(), pc.batch_sizes.end());
  }
  const int prompt = static_cast<int>(run.prompt_tokens_mean);
  pc.contexts = {prompt, prompt + max_len / 2, prompt + max_len};
  pc.steps = options.quick ? 3 : 8;

  // Threads of each measured run's roles: colocate variants use the ATen thread count of their
  // label ("colocate_1thread": 1, "colocate": all cores), the dedicated modes the split.
  auto threads_of = [&](const std::string& label, bool gen) {
    if (planner::label_mode(label) != planner::Mode::kColocate) {
      return gen ? run.generator_threads : run.trainer_threads;
    }
    const auto n = label.find("thread");
    if (n != std::string::npos) {
      const auto u = label.find('_');
      return std::max(1, std::atoi(label.substr(u + 1, n - u - 1).c_str()));
    }
    return run.colocate_threads;
  };
  std::vector<int> budgets;
  for (const auto& [label, seconds] : run.iteration_seconds) {
    budgets.push_back(threads_of(label, true));
    budgets.push_back(threads_of(label, false));
  }
  // Each core budget a role used in the measured run, profiled once.
  std::map<int, planner::PtlTable> ptl;
  std::map<int, planner::TrainerModel> trainer;
  json inputs = json::object();
  for (int threads : budgets) {
    if (ptl.count(threads)) continue;
    core::apply_core_budget(threads);
    ptl.emplace(threads, planner::PtlTable::from_json(engine::measure_profile(lm, pc).to_json()));
    trainer[threads] = measure_trainer(lm, seqs, prompt, run.micro_batch_tokens);
    const auto& p = ptl.at(threads);
    inputs[std::to_string(threads) + "_threads"] = {
        {"ptl_ms_bs1", 1e3 * p.step_seconds(1, prompt + max_len / 2.0)},
        {"ptl_ms_max_batch", 1e3 * p.step_seconds(run.max_batch, prompt + max_len / 2.0)},
        {"ptl_ms_generator_batch", 1e3 * p.step_seconds(gen_batch, prompt + max_len / 2.0)},
        {"prefill_tokens_per_s", p.prefill_tokens_per_s()},
        {"train_tokens_per_s", trainer[threads].tokens_per_s},
        {"optimizer_step_s", trainer[threads].step_overhead_s}};
  }
  core::apply_core_budget(run.trainer_threads);
  const double weight_s = measure_weight_copy(lm);
  engine::ProfileConfig ipc = pc;  // one decode point: the measured batch at mid context
  ipc.batch_sizes = {gen_batch};
  ipc.contexts = {prompt + max_len / 2};
  const auto [gen_slow, train_slow] =
      measure_interference(lm->config(), seqs, prompt, run.micro_batch_tokens, ipc, inputs);
  core::apply_core_budget(run.trainer_threads);

  std::map<std::string, planner::ModeSetup> setups;
  for (const auto& [label, seconds] : run.iteration_seconds) {
    planner::ModeSetup s;
    s.generator = planner::measured_instance(ptl.at(threads_of(label, true)), run.batch_of(label));
    s.trainer = trainer.at(threads_of(label, false));
    s.weight_update_s = weight_s;
    s.gen_slowdown = gen_slow;
    s.train_slowdown = train_slow;
    setups[label] = s;
  }
  json result = planner::compare_modes(run, setups);
  result["measured"] = label;
  result["model_config"] = config_path;
  result["inputs"] = inputs;
  result["inputs"]["weight_copy_s"] = weight_s;
  result["inputs"]["prompt_tokens_mean"] = run.prompt_tokens_mean;
  result["workload"] = {
      {"prompts", run.prompts},       {"group_size", run.group_size},
      {"iterations", run.iterations}, {"max_batch", run.max_batch},
      {"batch_per_mode", run.batch},  {"micro_batch_tokens", run.micro_batch_tokens}};
  result["goal"] = "max_relative_error <= 0.15 (emulated vs measured iteration time per mode)";
  return result;
}

}  // namespace

// Offline (STREAMRL_RL_MODES_JSON=FILE): the saved run against a profile taken now. Otherwise the
// modes are measured here, and every round profiles right after it measures, so prediction and
// measurement see the same machine; each mode's error is the median over rounds, with its spread.
json run_emulator_bench(const BenchOptions& options) {
  if (const char* path = std::getenv("STREAMRL_RL_MODES_JSON"); path && *path) {
    return predict(read_measured(path), options, path);
  }
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_emulator_" + std::to_string(::getpid()));
  // Five rounds: one round's error per mode swings 0.0-0.59 with the load of this shared 2-core
  // machine, and three runs of three rounds put the worst mode's median at 0.10-0.22.
  const int rounds = options.quick ? 1 : 5;
  Rounds log("emulator", options.threads > 0 ? options.threads : 2);
  json last;
  for (int r = 0; r < rounds; ++r) {
    log.begin_round(r);
    last = predict(measure_modes_once(options, root, r, rounds), options,
                   "measured in round " + std::to_string(r + 1));
    log.add("worst_round_error", last["max_relative_error"]);
    log.add("worst_round_error_stage_calibrated", last["max_relative_error_stage_calibrated"]);
    const std::string baseline = last["colocate_baseline"];
    for (const auto& [label, m] : last["modes"].items()) {
      // The four modes, colocate by this round's fastest variant, under one name each round;
      // each colocate variant also under its own.
      const bool headline = planner::label_mode(label) != planner::Mode::kColocate;
      if (!headline && m.contains("relative_error")) {
        log.add("relative_error." + label, m["relative_error"]);
      }
      if (!headline && label != baseline) continue;
      const std::string mode = headline ? label : "colocate";
      if (m.contains("relative_error")) log.add("mode_error." + mode, m["relative_error"]);
      if (m.contains("calibrated_error")) log.add("mode_error_cal." + mode, m["calibrated_error"]);
      // Which stage the profile misses: emulated over measured, per stage. Not async's
      // generation: its generator runs an iteration ahead, so its measured generate stage (the
      // generator's busy time while the trainer collects) is not the emulated generation span.
      for (const char* stage : {"generate", "train"}) {
        if (mode == "async" && std::string(stage) == "generate") continue;
        const std::string measured_key = std::string("measured_") + stage + "_s";
        if (!m.contains(measured_key) || !(m[measured_key].get<double>() > 0)) continue;
        log.add(std::string("predicted_over_measured.") + mode + "." + stage,
                m[std::string("predicted_") + stage + "_s"].get<double>() /
                    m[measured_key].get<double>());
      }
    }
  }
  fs::remove_all(root);
  // Each mode's error is the median over rounds (as every figure here), and the headline is the
  // worst mode's. The worst mode of each round, medianed, is kept beside it: a maximum over four
  // noisy errors per round, it reads the round's noise more than the emulator's.
  double worst = 0, worst_cal = 0;
  json per_mode = json::object();
  for (const char* mode : {"colocate", "disagg", "stream", "async"}) {
    const std::string key = std::string("mode_error.") + mode;
    if (log.values(key).empty()) continue;
    per_mode[mode] = log.median(key);
    worst = std::max(worst, log.median(key));
    if (!log.values("mode_error_cal." + std::string(mode)).empty()) {
      worst_cal = std::max(worst_cal, log.median("mode_error_cal." + std::string(mode)));
    }
  }
  json out = last;  // the last round's full comparison
  out["rounds"] = rounds;
  out["max_relative_error"] = worst;
  out["max_relative_error_stage_calibrated"] = worst_cal;
  out["relative_error_per_mode"] = per_mode;
  out["worst_round_error"] = log.median("worst_round_error");
  out["worst_round_error_stage_calibrated"] = log.median("worst_round_error_stage_calibrated");
  out["per_round"] = log.to_json();
  out["load"] = log.load_json();
  return out;
}

}  // namespace streamrl::bench
