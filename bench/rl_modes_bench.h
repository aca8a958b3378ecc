// The same GRPO workload (default task, same cores, same iterations) in the four controller modes
// side by side, for the task as generated (headline) and for the main job's curriculum: samples/s
// relative to colocate, idle fraction per role, and how close async comes to the overlap bound
// max(T_gen, T_train) (StreamRL §3-§4).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_rl_modes(const BenchOptions& options);

// One run of every variant on the headline workload (the whole task) under `root`, as the JSON
// that bench emulator's MeasuredRun reads (workload, modes with medians and lengths); `round` of
// `rounds` is for the progress lines.
nlohmann::json measure_modes_once(const BenchOptions& options, const std::filesystem::path& root,
                                  int round, int rounds);

// The headline workload's overrides: the task as generated (every difficulty, final-answer
// reward), whose long-tailed outputs are the setting StreamRL is about.
inline const std::vector<std::string> kWholeTaskOverrides = {"data.max_difficulty=-1",
                                                             "data.reward=answer"};

// One benchmark variant: a mode with its thread split.
struct Variant {
  std::string name, mode;
  std::vector<std::string> overrides;
};

// Colocate with one ATen thread and with `cores`, then disagg, stream and async with the cores
// split between generator and trainer (names: colocate_1thread, colocate, disagg, stream, async).
std::vector<Variant> variants_for(int cores);

// The pieces other benches that run `configs/rl_sum.yaml` share with this one:
// --ckpt, else the main job's SFT checkpoint (InputError naming what is missing and how to make
// it).
std::string require_checkpoint(const char* bench, const BenchOptions& options);
// The overrides of one measured run named `name` under `root`: from `ckpt`, `iterations`
// iterations, no evaluation or checkpoints, per-iteration lengths logged.
std::vector<std::string> bench_run_overrides(const std::string& name,
                                             const std::filesystem::path& root,
                                             const std::string& ckpt, int iterations);
// Steady-state medians of a finished run's metrics.jsonl (the first iteration is skipped: warm-up,
// and async generates two iterations ahead there): iteration_s, generate_s, train_s, ...
nlohmann::json summarize_run(const std::filesystem::path& run_dir);

}  // namespace streamrl::bench
