// The same GRPO workload (default task, same cores, same iterations) in the four controller modes
// side by side, for the task as generated (headline) and for the main job's curriculum: samples/s
// relative to colocate, idle fraction per role, and how close async comes to the overlap bound
// max(T_gen, T_train) (StreamRL §3-§4; DESIGN.md §1).
#pragma once

#include <filesystem>

#include "registry.h"

namespace streamrl::bench {

nlohmann::json run_rl_modes(const BenchOptions& options);

// One run of every variant on the headline workload (the whole task) under `root`, as the JSON
// that bench emulator's MeasuredRun reads (workload, modes with medians and lengths).
nlohmann::json measure_modes_once(const BenchOptions& options, const std::filesystem::path& root);

}  // namespace streamrl::bench
