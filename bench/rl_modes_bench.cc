#include "rl_modes_bench.h"

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>

#include "rounds.h"
#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/telemetry/metrics_log.h"

namespace streamrl::bench {
namespace fs = std::filesystem;
namespace {

double median(const std::vector<double>& v) { return v.empty() ? 0 : core::median(v); }

// Runs one variant of a workload (configs/rl_sum.yaml under `workload` then `options`'
// overrides) in `root`/name and returns its steady-state summary.
nlohmann::json run_variant(const BenchOptions& options, const std::string& ckpt,
                           const std::vector<std::string>& workload, const fs::path& root,
                           const Variant& v, int iterations) {
  fs::remove_all(root / v.name);
  std::vector<std::string> ov = bench_run_overrides(v.name, root, ckpt, iterations);
  ov.push_back("mode=" + v.mode);
  ov.insert(ov.end(), v.overrides.begin(), v.overrides.end());
  ov.insert(ov.end(), workload.begin(), workload.end());
  ov.insert(ov.end(), options.overrides.begin(), options.overrides.end());
  core::Config cfg =
      core::Config::from_file(std::string(STREAMRL_SOURCE_DIR) + "/configs/rl_sum.yaml", ov);
  rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);
  rl::run_rl(rc, cfg.resolved_yaml());
  nlohmann::json s = summarize_run(root / v.name);
  s["trace"] = (root / v.name / "trace.json").string();
  return s;
}

struct Workload {
  std::string name;
  std::vector<std::string> overrides;
};

// Figures of one mode that are summarised over rounds.
constexpr const char* kFigures[] = {"iteration_s", "samples_per_s", "generate_s",
                                    "train_s",     "train_cpu_s",   "overlap_bound_s"};

// The workload's JSON from the rounds: each mode's figures as medians (the keys bench emulator
// reads) with their spread, the last round's lengths, and ratios as medians of per-round ratios.
nlohmann::json workload_json(const Workload& w, const std::string& ckpt, int iterations, int cores,
                             const BenchOptions& options, const Rounds& log,
                             const std::map<std::string, nlohmann::json>& last,
                             const fs::path& root) {
  const std::string p = w.name + ".";
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& [name, detail] : last) {
    nlohmann::json m = detail;
    for (const char* f : kFigures) {
      m[f] = log.median(p + name + "." + f);
      m["rounds"][f] = log.summary(p + name + "." + f);
    }
    modes[name] = m;
  }
  nlohmann::json speedup, speedup_spread;
  for (const char* m : {"disagg", "stream", "async"}) {
    const nlohmann::json r = log.ratio(p + m + ".samples_per_s", p + "colocate_best.samples_per_s");
    speedup[m] = r["median"];
    speedup_spread[m] = r;
  }
  const nlohmann::json bound = log.ratio(p + "async.iteration_s", p + "async.overlap_bound_s");
  const nlohmann::json train_ratio =
      log.ratio(p + "colocate_1thread.train_s", p + "disagg.train_s");
  const nlohmann::json train_cpu_ratio =
      log.ratio(p + "colocate_1thread.train_cpu_s", p + "disagg.train_cpu_s");
  std::vector<std::string> all = w.overrides;
  all.insert(all.end(), options.overrides.begin(), options.overrides.end());
  return {{"workload",
           {{"task", "sum"},
            {"checkpoint", ckpt},
            {"iterations", iterations},
            {"cores", cores},
            {"config", "configs/rl_sum.yaml"},
            {"overrides", all}}},
          {"modes", modes},
          {"speedup", speedup},
          {"speedup_rounds", speedup_spread},
          {"async_over_bound", bound["median"]},
          {"async_over_bound_rounds", bound},
          // The same samples' training on the same thread count, colocated and dedicated.
          {"colocate_train_over_disagg_train", train_ratio["median"]},
          {"colocate_train_over_disagg_train_rounds", train_ratio},
          // The same in the trainer thread's CPU time: the work, without waits for a core.
          {"colocate_train_cpu_over_disagg_train_cpu", train_cpu_ratio},
          {"runs_dir", (root / w.name).string()}};
}

constexpr const char* kDefaultCheckpoint = "runs/sft_sum/final";
const Workload kWholeTask = {"whole_task", kWholeTaskOverrides};

// One round of `w`: every variant once, in order, each figure logged under "workload.variant.";
// the baseline is the faster colocate variant of this round (colocate_best).
void run_round(const BenchOptions& options, const std::string& ckpt, const Workload& w,
               const std::vector<Variant>& variants, const fs::path& root, int iterations,
               int round, int rounds, Rounds& log, std::map<std::string, nlohmann::json>& runs) {
  for (const auto& v : variants) {
    std::cerr << "bench: round " << round + 1 << "/" << rounds << " " << w.name << " " << v.name
              << " (" << iterations << " iterations)" << std::endl;
    nlohmann::json s = run_variant(options, ckpt, w.overrides, root / w.name, v, iterations);
    for (const char* f : kFigures) log.add(w.name + "." + v.name + "." + f, s[f]);
    runs[v.name] = std::move(s);
  }
  const double best = std::max(log.values(w.name + ".colocate.samples_per_s").back(),
                               log.values(w.name + ".colocate_1thread.samples_per_s").back());
  log.add(w.name + ".colocate_best.samples_per_s", best);
}

}  // namespace

// Colocate gets all the cores for both stages; it is run with one and with all ATen threads and
// the faster is the baseline, so the comparison is not against a badly threaded colocate. The
// dedicated modes split the cores: generator on one, trainer on the rest.
std::vector<Variant> variants_for(int cores) {
  const std::string split_gen =
      "sgs.threads_per_instance=" + std::to_string(std::max(1, cores / 2));
  const std::string split_train =
      "resources.trainer_threads=" + std::to_string(std::max(1, cores - cores / 2));
  return {
      {"colocate_1thread", "colocate", {"run.threads=1"}},
      {"colocate", "colocate", {"run.threads=" + std::to_string(cores)}},
      {"disagg", "disagg", {split_gen, split_train}},
      {"stream", "stream", {split_gen, split_train}},
      {"async", "async", {split_gen, split_train}},
  };
}

nlohmann::json summarize_run(const fs::path& run_dir) {
  std::vector<double> iter, gen, train, train_cpu, idle_gen, idle_trainer, samples;
  bool first = true;
  for (const auto& r : telemetry::MetricsLog::read(run_dir / "metrics.jsonl")) {
    if (!r.contains("stage_seconds")) continue;
    if (first) {
      first = false;
      continue;
    }
    const auto& s = r["stage_seconds"];
    iter.push_back(s["iteration"].get<double>());
    gen.push_back(s["generate"].get<double>());
    train.push_back(s["train"].get<double>() + s["sample_work"].get<double>() +
                    s["weight_update"].get<double>());
    train_cpu.push_back(s.value("train_cpu", 0.0));
    idle_gen.push_back(r["idle_fraction"]["generator"].get<double>());
    idle_trainer.push_back(r["idle_fraction"]["trainer"].get<double>());
    samples.push_back(r["samples"].get<double>());
  }
  // Every iteration's output lengths and zero-advantage flags (groups consecutive) and which
  // group each dynamic-sampling refill replaced, for the step emulator (bench emulator) to replay.
  nlohmann::json lengths = nlohmann::json::array(), zero = nlohmann::json::array(),
                 released = nlohmann::json::array();
  if (fs::exists(run_dir / "samples.jsonl")) {
    for (const auto& r : telemetry::MetricsLog::read(run_dir / "samples.jsonl")) {
      std::vector<int> l;
      for (double x : r["lengths"]) l.push_back(static_cast<int>(x));
      lengths.push_back(l);
      zero.push_back(r["zero_advantage"]);
      released.push_back(r.value("released_after", nlohmann::json::array()));
    }
  }
  const double it = median(iter);
  return {{"iteration_s", it},
          {"lengths", lengths},
          {"zero_advantage", zero},
          {"released_after", released},
          {"samples_per_s", median(samples) / std::max(1e-9, it)},
          {"generate_s", median(gen)},
          {"train_s", median(train)},
          {"train_cpu_s", median(train_cpu)},
          {"overlap_bound_s", std::max(median(gen), median(train))},
          {"idle_fraction", {{"generator", median(idle_gen)}, {"trainer", median(idle_trainer)}}},
          {"iterations_measured", iter.size()}};
}

std::vector<std::string> bench_run_overrides(const std::string& name, const fs::path& root,
                                             const std::string& ckpt, int iterations) {
  return {"run.name=" + name,
          "run.dir=" + root.string(),
          "run.resume=false",
          "policy.init_from=" + ckpt,
          "train.iterations=" + std::to_string(iterations),
          "eval.n=0",
          "checkpoint.every=0",
          "telemetry.samples=true"};
}

std::string require_checkpoint(const char* bench, const BenchOptions& options) {
  if (!options.ckpt.empty()) {
    if (!fs::exists(fs::path(options.ckpt) / "config.json")) {
      throw InputError(std::string("bench ") + bench + ": --ckpt " + options.ckpt +
                       " is not a checkpoint (no config.json in it)");
    }
    return options.ckpt;
  }
  if (!fs::exists(fs::path(kDefaultCheckpoint) / "config.json")) {
    throw InputError(
        std::string("bench ") + bench + " needs the SFT checkpoint " + kDefaultCheckpoint +
        " (or --ckpt DIR); create it with: streamrl sft --config configs/sft_sum.yaml");
  }
  return kDefaultCheckpoint;
}

nlohmann::json measure_modes_once(const BenchOptions& options, const fs::path& root, int round,
                                  int rounds) {
  const std::string ckpt = require_checkpoint("emulator", options);
  const int iterations = options.quick ? 3 : 8;
  const int cores = options.threads > 0 ? options.threads : 2;
  Rounds log("emulator", cores);
  log.begin_round(0);
  std::map<std::string, nlohmann::json> runs;
  run_round(options, ckpt, kWholeTask, variants_for(cores), root, iterations, round, rounds, log,
            runs);
  return workload_json(kWholeTask, ckpt, iterations, cores, options, log, runs, root);
}

// Two workloads of the default task: the task as generated (every difficulty, final-answer reward:
// long-tailed outputs, the setting StreamRL is about; the headline) and the main job's recipe
// (configs/rl_sum.yaml as is: its pass-rate curriculum draws mostly easy, short prompts). Every
// round runs every variant of both workloads once (interleaved), so load drift spreads over all of
// them.
nlohmann::json run_rl_modes(const BenchOptions& options) {
  const std::string ckpt = require_checkpoint("rl_modes", options);
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_rl_modes_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const int iterations = options.quick ? 3 : 8;
  const int rounds = options.quick ? 1 : 3;
  const int cores = options.threads > 0 ? options.threads : 2;
  const std::vector<Workload> workloads = {kWholeTask, {"main_job", {}}};
  const std::vector<Variant> variants = variants_for(cores);
  Rounds log("rl_modes", cores);
  std::map<std::string, std::map<std::string, nlohmann::json>> last;  // workload -> mode -> run
  for (int r = 0; r < rounds; ++r) {
    log.begin_round(r);
    for (const auto& w : workloads) {
      run_round(options, ckpt, w, variants, root, iterations, r, rounds, log, last[w.name]);
    }
  }
  nlohmann::json whole =
      workload_json(workloads[0], ckpt, iterations, cores, options, log, last["whole_task"], root);
  nlohmann::json main_job =
      workload_json(workloads[1], ckpt, iterations, cores, options, log, last["main_job"], root);
  nlohmann::json out = whole;  // the headline keys, and what bench emulator reads
  out["benchmark"] = "rl_modes";
  out["headline_workload"] = "whole_task";
  out["rounds"] = rounds;
  out["load"] = log.load_json();
  out["goals"] = {{"stream", 1.2},
                  {"async", 1.5},
                  {"async_over_bound", 1.15},
                  {"colocate_train_over_disagg_train", 1.1}};
  out["workloads"] = {{"whole_task", whole}, {"main_job", main_job}};
  return out;
}

}  // namespace streamrl::bench
