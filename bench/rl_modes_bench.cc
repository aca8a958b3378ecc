#include "rl_modes_bench.h"

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/stats.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/telemetry/metrics_log.h"

namespace streamrl::bench {
namespace fs = std::filesystem;
namespace {

double median(const std::vector<double>& v) { return v.empty() ? 0 : core::median(v); }

// Steady-state medians of one mode's run, skipping the first iteration (warm-up; async also
// generates two iterations ahead there).
nlohmann::json summarize(const fs::path& run_dir) {
  std::vector<double> iter, gen, train, idle_gen, idle_trainer, samples;
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
    idle_gen.push_back(r["idle_fraction"]["generator"].get<double>());
    idle_trainer.push_back(r["idle_fraction"]["trainer"].get<double>());
    samples.push_back(r["samples"].get<double>());
  }
  // Every iteration's output lengths and zero-advantage flags (groups consecutive), for the step
  // emulator (bench emulator) to replay exactly.
  nlohmann::json lengths = nlohmann::json::array(), zero = nlohmann::json::array();
  if (fs::exists(run_dir / "samples.jsonl")) {
    for (const auto& r : telemetry::MetricsLog::read(run_dir / "samples.jsonl")) {
      std::vector<int> l;
      for (double x : r["lengths"]) l.push_back(static_cast<int>(x));
      lengths.push_back(l);
      zero.push_back(r["zero_advantage"]);
    }
  }
  const double it = median(iter);
  return {{"iteration_s", it},
          {"lengths", lengths},
          {"zero_advantage", zero},
          {"samples_per_s", median(samples) / std::max(1e-9, it)},
          {"generate_s", median(gen)},
          {"train_s", median(train)},
          {"overlap_bound_s", std::max(median(gen), median(train))},
          {"idle_fraction", {{"generator", median(idle_gen)}, {"trainer", median(idle_trainer)}}},
          {"iterations_measured", iter.size()}};
}

// The four modes on one workload: configs/rl_sum.yaml under `workload` then `options`' overrides,
// runs under `root`.
nlohmann::json measure_workload(const BenchOptions& options, const std::string& ckpt,
                                const std::vector<std::string>& workload, const fs::path& root) {
  const int iterations = options.quick ? 3 : 8;
  const int cores = options.threads > 0 ? options.threads : 2;
  fs::remove_all(root);

  struct Variant {
    std::string name, mode;
    std::vector<std::string> overrides;
  };
  // Colocate gets all the cores for both stages; it is run with one and with all ATen threads and
  // the faster is the baseline, so the comparison is not against a badly threaded colocate. The
  // dedicated modes split the cores: generator on one, trainer on the rest.
  const std::string split_gen =
      "sgs.threads_per_instance=" + std::to_string(std::max(1, cores / 2));
  const std::string split_train =
      "resources.trainer_threads=" + std::to_string(std::max(1, cores - cores / 2));
  std::vector<Variant> variants = {
      {"colocate_1thread", "colocate", {"run.threads=1"}},
      {"colocate", "colocate", {"run.threads=" + std::to_string(cores)}},
      {"disagg", "disagg", {split_gen, split_train}},
      {"stream", "stream", {split_gen, split_train}},
      {"async", "async", {split_gen, split_train}},
  };
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& v : variants) {
    std::vector<std::string> ov = {"mode=" + v.mode,
                                   "run.name=" + v.name,
                                   "run.dir=" + root.string(),
                                   "run.resume=false",
                                   "policy.init_from=" + ckpt,
                                   "train.iterations=" + std::to_string(iterations),
                                   "eval.n=0",
                                   "checkpoint.every=0",
                                   "telemetry.samples=true"};
    ov.insert(ov.end(), v.overrides.begin(), v.overrides.end());
    ov.insert(ov.end(), workload.begin(), workload.end());
    ov.insert(ov.end(), options.overrides.begin(), options.overrides.end());
    core::Config cfg =
        core::Config::from_file(std::string(STREAMRL_SOURCE_DIR) + "/configs/rl_sum.yaml", ov);
    rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);
    std::cerr << "bench rl_modes: " << root.filename().string() << " " << v.name << " ("
              << iterations << " iterations)" << std::endl;
    rl::run_rl(rc, cfg.resolved_yaml());
    modes[v.name] = summarize(root / v.name);
    modes[v.name]["trace"] = (root / v.name / "trace.json").string();
  }
  const double colocate_sps = std::max(modes["colocate"]["samples_per_s"].get<double>(),
                                       modes["colocate_1thread"]["samples_per_s"].get<double>());
  nlohmann::json speedup;
  for (const char* m : {"disagg", "stream", "async"}) {
    speedup[m] = modes[m]["samples_per_s"].get<double>() / colocate_sps;
  }
  const auto& a = modes["async"];
  std::vector<std::string> all = workload;
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
          {"async_over_bound",
           a["iteration_s"].get<double>() / std::max(1e-9, a["overlap_bound_s"].get<double>())},
          {"runs_dir", root.string()}};
}

}  // namespace

// Two workloads of the default task: the task as generated (every difficulty, final-answer reward:
// long-tailed outputs, the setting StreamRL is about; the headline) and the main job's curriculum
// (configs/rl_sum.yaml as is: difficulty 0 only, ~10-token outputs, training-bound).
nlohmann::json run_rl_modes(const BenchOptions& options) {
  const std::string ckpt = "runs/sft_sum/final";
  if (!fs::exists(fs::path(ckpt) / "config.json")) {
    throw InputError("bench rl_modes needs the SFT checkpoint " + ckpt +
                     "; create it with: streamrl sft --config configs/sft_sum.yaml");
  }
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_rl_modes_" + std::to_string(::getpid()));
  nlohmann::json whole = measure_workload(
      options, ckpt, {"data.max_difficulty=-1", "data.reward=answer"}, root / "whole_task");
  nlohmann::json main_job = measure_workload(options, ckpt, {}, root / "main_job");
  nlohmann::json out = whole;  // the headline keys, and what bench emulator reads
  out["benchmark"] = "rl_modes";
  out["headline_workload"] = "whole_task";
  out["goals"] = {{"stream", 1.2}, {"async", 1.5}, {"async_over_bound", 1.15}};
  out["workloads"] = {{"whole_task", whole}, {"main_job", main_job}};
  return out;
}

}  // namespace streamrl::bench
