// `streamrl bench NAME [--json]`: runs one benchmark from bench/ and prints its JSON result.
#include <iostream>

#include "commands.h"
#include "registry.h"
#include "streamrl/core/errors.h"

namespace streamrl::cli {

void add_bench(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("bench", "Run a benchmark (side-by-side variants, JSON result)");
  auto name = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto opts = std::make_shared<bench::BenchOptions>();
  std::string names;
  for (const auto& b : bench::all_benchmarks()) names += "\n  " + b.name + ": " + b.description;
  app->add_option("name", *name, "Benchmark name:" + names)->required();
  app->add_flag("--json", *json, "Make the last line printed one JSON object");
  app->add_flag("--quick", opts->quick, "Smaller workload (smoke test)");
  app->add_option("--threads", opts->threads, "Threads (default: all cores)");
  app->add_option("--ckpt", opts->ckpt, "Policy checkpoint (benchmarks that need one)");
  auto device = std::make_shared<DeviceFlags>();
  add_device_flags(app, device.get());
  std::string with_config;  // the benchmarks --set applies to
  for (const auto& b : bench::all_benchmarks()) {
    if (b.takes_run_config) with_config += (with_config.empty() ? "" : ", ") + b.name;
  }
  app->add_option(
      "--set", opts->overrides,
      "key=value over the run config (" + with_config + ": configs/rl_sum.yaml), repeatable");
  out.push_back({app, [app, name, json, opts, device, with_config] {
                   for (const auto& b : bench::all_benchmarks()) {
                     if (b.name != *name) continue;
                     if (!opts->overrides.empty() && !b.takes_run_config) {
                       throw UsageError("--set applies to bench " + with_config + " only");
                     }
                     if ((app->count("--device") || app->count("--dtype")) && !b.takes_device) {
                       throw UsageError(
                           "--device applies to bench model_speed only (the RL "
                           "benchmarks take --set run.device=...)");
                     }
                     opts->device = device->device;
                     opts->dtype = device->dtype;
                     nlohmann::json r = b.run(*opts);
                     r["benchmark"] = b.name;
                     std::cout << (*json ? r.dump() : r.dump(2)) << std::endl;
                     return 0;
                   }
                   throw UsageError("unknown benchmark '" + *name +
                                    "' (see streamrl bench --help)");
                 }});
}

}  // namespace streamrl::cli
