#include "allocator_bench.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "rl_modes_bench.h"
#include "rounds.h"
#include "streamrl/core/errors.h"
#include "streamrl/dist/launcher.h"

namespace streamrl::bench {
namespace fs = std::filesystem;
namespace {

// A mode variant of bench rl_modes under one malloc setting.
struct MallocVariant {
  std::string name;
  bool glibc_default;  // STREAMRL_MALLOC=default in the child
  Variant mode;
};

// The child is a fresh process on purpose: glibc's dynamic mmap threshold only rises after the
// first large free, so a process that already ran a variant would hide the effect being measured.
double train_seconds(const BenchOptions& options, const std::string& ckpt, const fs::path& root,
                     const MallocVariant& v, int iterations) {
  fs::remove_all(root / v.name);
  dist::LaunchOptions lo;
  lo.args = {"train", "--config", std::string(STREAMRL_SOURCE_DIR) + "/configs/rl_sum.yaml"};
  for (const auto& o : bench_run_overrides(v.name, root, ckpt, iterations)) lo.args.push_back(o);
  lo.args.push_back("mode=" + v.mode.mode);
  for (const auto& o : v.mode.overrides) lo.args.push_back(o);
  for (const auto& o : kWholeTaskOverrides) lo.args.push_back(o);
  for (const auto& o : options.overrides) lo.args.push_back(o);
  lo.env = {std::string("STREAMRL_MALLOC=") + (v.glibc_default ? "default" : "tuned")};
  lo.log_file = (root / (v.name + ".log")).string();
  lo.timeout_s = 900;
  const int rc = dist::launch_local(lo);
  if (rc != 0) {
    throw RuntimeFailure("bench allocator: the " + v.name + " run failed (exit " +
                         std::to_string(rc) + "); its output is in " + lo.log_file);
  }
  return summarize_run(root / v.name)["train_s"].get<double>();
}

}  // namespace

nlohmann::json run_allocator_bench(const BenchOptions& options) {
  const std::string ckpt = require_checkpoint("allocator", options);
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_allocator_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const int iterations = options.quick ? 3 : 8;
  const int rounds = options.quick ? 1 : 3;
  // One core per role, as rl_modes splits two cores: colocate_1thread and disagg.
  std::vector<MallocVariant> variants;
  for (const Variant& m : variants_for(2)) {
    if (m.name != "colocate_1thread" && m.name != "disagg") continue;
    for (const bool glibc : {true, false}) {
      variants.push_back({m.mode + (glibc ? "_glibc" : "_tuned"), glibc, m});
    }
  }
  Rounds log("allocator", 2);
  for (int r = 0; r < rounds; ++r) {
    log.begin_round(r);
    for (const auto& v : variants) {
      std::cerr << "bench allocator: round " << r + 1 << "/" << rounds << " " << v.name << " ("
                << iterations << " iterations, fresh process)" << std::endl;
      log.add(v.name + ".train_s", train_seconds(options, ckpt, root, v, iterations));
    }
  }
  fs::remove_all(root);
  nlohmann::json train;
  for (const auto& v : variants) train[v.name] = log.summary(v.name + ".train_s");
  return {
      {"train_s", train},
      {"colocate_glibc_over_tuned", log.ratio("colocate_glibc.train_s", "colocate_tuned.train_s")},
      {"disagg_glibc_over_tuned", log.ratio("disagg_glibc.train_s", "disagg_tuned.train_s")},
      {"colocate_train_over_disagg_train_glibc",
       log.ratio("colocate_glibc.train_s", "disagg_glibc.train_s")},
      {"colocate_train_over_disagg_train",
       log.ratio("colocate_tuned.train_s", "disagg_tuned.train_s")},
      {"goal_colocate_train_over_disagg_train", 1.1},
      {"workload", {{"iterations", iterations}, {"checkpoint", ckpt}, {"task", "whole_task"}}},
      {"rounds", rounds},
      {"load", log.load_json()},
      {"note",
       "train stage (train + per-sample work + weight update) median per iteration, first "
       "iteration skipped; each run a fresh `streamrl train` on one core per role; glibc = "
       "STREAMRL_MALLOC=default"},
  };
}

}  // namespace streamrl::bench
