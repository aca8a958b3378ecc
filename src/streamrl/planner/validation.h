// Validation of the step emulator against measured RL iterations on this machine (issue #8): the
// measured side is the JSON of `streamrl bench rl_modes --json`, the emulator's inputs are this
// machine's component profiles (PTL(BS) of the generator, training tokens/s) and the measured
// batch's output lengths. `compare_modes` is the whole comparison.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "streamrl/planner/cost_model.h"
#include "streamrl/planner/emulator.h"

namespace streamrl::planner {

// What the measured run did and how long each mode's iterations took. Read from
//   {"workload": {"prompts_per_iteration", "group_size", "iterations", "max_batch_size",
//                 "micro_batch_tokens", "cores" (colocate all, generator half, trainer the rest)
//                 or "colocate_threads", "generator_threads", "trainer_threads",
//                 "prompt_tokens_mean", "checkpoint"},
//    "modes": {"colocate": {"iteration_s" | "iteration_seconds" | "stage_seconds": {"iteration"}
//                           (steady state) | "wall_seconds" (all iterations),
//                           "lengths": [[per-sample output tokens] per iteration] | [...] |
//                           "response_length_per_iteration": [{"p50", "p90", "max",
//                                                              "samples"}, ...] |
//                           "response_length": {"p50", "p90", "max"}}, ...}}
// where workload keys may also sit at the top level or inside each mode, and modes may sit at the
// top level. Missing required keys are InputErrors that name them.
struct MeasuredRun {
  int prompts = 0;
  int group_size = 1;
  int iterations = 1;
  int max_batch = 128;
  int64_t micro_batch_tokens = 8192;
  int colocate_threads = 2, generator_threads = 1, trainer_threads = 1;
  double prompt_tokens_mean = 0;  // 0 = unknown (the bench fills it from the task)
  bool steady_state = true;       // times exclude the first iteration (pipeline fill)
  std::string checkpoint;
  std::map<Mode, double> iteration_seconds;
  std::map<Mode, std::vector<std::vector<int>>> lengths;  // per mode, per iteration
  std::map<Mode, nlohmann::json> stage_seconds;
  // Measured generation and training seconds per iteration ("generate_s"/"train_s" or
  // stage_seconds.generate/.train), for the stage-calibrated prediction.
  std::map<Mode, std::pair<double, double>> stages;

  static MeasuredRun from_json(const nlohmann::json& j);
};

// One mode's emulator inputs measured on this machine.
struct ModeSetup {
  InstanceModel generator;
  TrainerModel trainer;
  double weight_update_s = 0;
};

// Emulates every measured mode with its setup on the measured batches (one instance, FIFO, as the
// measured run) and compares the steady-state (or mean) iteration time. A second prediction is
// stage-calibrated: generator and trainer speeds are scaled so that the emulated stage times of a
// reference mode (colocate for colocate, disagg for the dedicated modes) equal its measured ones.
// That removes drift between the profiling and the measured run (a loaded machine) and leaves the
// overlap of the stages as what is tested. Returns {"modes": {m: {"measured_s", "predicted_s",
// "relative_error", "predicted": {...}, "calibrated_s", "calibrated_error"}},
// "max_relative_error", "max_relative_error_stage_calibrated"}.
nlohmann::json compare_modes(const MeasuredRun& run, const std::map<Mode, ModeSetup>& setups);

}  // namespace streamrl::planner
