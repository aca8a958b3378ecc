// Benchmarks run as `streamrl bench NAME [--json]`. Each runs its compared variants side by side in
// one process and returns one JSON object with the figures and the goal each is measured against.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace streamrl::bench {

struct BenchOptions {
  bool quick = false;  // a smaller workload, for smoke tests
  int threads = 0;     // 0 = all available cores
  std::string ckpt;    // policy checkpoint for benchmarks that need one ("" = their default)
  std::vector<std::string> overrides;  // key=value over the run config (benchmarks that use one)
  std::string device = "cpu";          // --device: benchmarks with takes_device only
  std::string dtype = "auto";          // --dtype, with it
};

struct Benchmark {
  std::string name;
  std::string description;
  std::function<nlohmann::json(const BenchOptions&)> run;
  bool takes_run_config = false;  // runs configs/rl_sum.yaml, so --set applies
  bool takes_device = false;      // runs its model on --device
};

// `relative` under the source tree (the configs and data benchmarks run).
std::filesystem::path source_path(const std::string& relative);

// All benchmarks, in a stable order.
const std::vector<Benchmark>& all_benchmarks();

}  // namespace streamrl::bench
