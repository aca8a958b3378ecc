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
//    "modes": {"colocate" (also "colocate_1thread", ...: a mode name, optionally "_" and a
//               variant; each variant is compared on its own): {"iteration_s" | "iteration_seconds"
//               | "stage_seconds": {"iteration"}
//                           (steady state) | "wall_seconds" (all iterations),
//                           "lengths": [[per-sample output tokens] per iteration] | [...]
//                           (with "zero_advantage" and "released_after" per iteration) |
//                           "response_length_per_iteration": [{"p50", "p90", "max",
//                                                              "samples", "skipped"}, ...] |
//                           "response_length": {"p50", "p90", "max"}}, ...}}
// where workload keys may also sit at the top level or inside each mode, and modes may sit at the
// top level. Missing required keys are InputErrors that name them.
struct MeasuredRun {
  int prompts = 0;
  int group_size = 1;
  int iterations = 1;
  int max_batch = 128;  // the largest batch any measured run generated at
  // Per label, where runs differ: the colocated engine runs rollout.max_batch_size, the dedicated
  // modes' SGS instances the smaller sgs.max_batch_size ("max_batch_size" inside a mode).
  std::map<std::string, int> batch;
  int64_t micro_batch_tokens = 8192;
  int colocate_threads = 2, generator_threads = 1, trainer_threads = 1;
  double prompt_tokens_mean = 0;  // 0 = unknown (the bench fills it from the task)
  bool steady_state = true;       // times exclude the first iteration (pipeline fill)
  std::string checkpoint;
  // All keyed by the measured run's label ("colocate", "colocate_1thread", "stream", ...).
  std::map<std::string, double> iteration_seconds;
  std::map<std::string, std::vector<std::vector<int>>> lengths;  // per label, per iteration
  // Samples the trainer skipped (zero advantage) per iteration, where the run recorded them.
  std::map<std::string, std::vector<int>> skipped;
  // Which groups had zero advantage, per iteration, where the run recorded each sample's flag
  // ("zero_advantage": [[0|1 per sample]] beside "lengths"); preferred over the counts.
  std::map<std::string, std::vector<std::vector<int>>> skipped_groups;
  // Per iteration, per group: -1, or the group a dynamic-sampling refill replaced (Batch::
  // released_after), where the run recorded it ("released_after" beside "lengths").
  std::map<std::string, std::vector<std::vector<int>>> released_after;
  std::map<std::string, nlohmann::json> stage_seconds;
  // Measured generation and training seconds per iteration ("generate_s"/"train_s" or
  // stage_seconds.generate/.train), for the stage-calibrated prediction.
  std::map<std::string, std::pair<double, double>> stages;

  static MeasuredRun from_json(const nlohmann::json& j);
  // The batch the run labelled `label` generated at: its own, else max_batch.
  int batch_of(const std::string& label) const;
  // The batch of the dedicated modes' SGS instances (all alike), else max_batch.
  int dedicated_batch() const;
};

// One mode's emulator inputs measured on this machine.
// The mode of a label: its part before the first '_' ("colocate_1thread" -> colocate).
Mode label_mode(const std::string& label);

// One measured run's emulator inputs measured on this machine.
struct ModeSetup {
  InstanceModel generator;
  TrainerModel trainer;
  double weight_update_s = 0;
  // CPU interference when generator and trainer run at the same time on shared cores: each stage
  // runs `*_slowdown` times slower while the other one is busy (1 = none). Applied in proportion
  // to the share of the stage's time that the emulator overlaps with the other stage.
  double gen_slowdown = 1, train_slowdown = 1;
};

// Emulates every measured run with its setup (keyed by label) on the measured batches (one
// instance, FIFO, as the measured run; groups the trainer skipped marked as skipped) and compares
// the steady-state (or mean) iteration time; stream and async apply the setup's measured
// interference slowdowns in proportion to the overlap. A second prediction is stage-calibrated:
// speeds are scaled so that the emulated stage times of a reference run without overlapping stages
// (each colocate variant itself, disagg for the dedicated modes) equal its measured ones, and
// stream/async get interference slowdowns FITTED to their own measured stage times (never to the
// iteration time). That removes drift between the profiling and the measured run (a loaded, shared
// machine) and leaves the overlap and bubble structure of the modes as what is tested. Returns
// {"modes": {label: {"measured_s", "predicted_s", "relative_error", "predicted": {...},
// "predicted_generate_s", "predicted_train_s" (steady medians, beside
// "measured_generate_s"/"_train_s"), "interference", "calibrated_s", "calibrated_error",
// "fitted_interference"}}, "max_relative_error", "max_relative_error_stage_calibrated" (over the
// four modes, colocate by its fastest variant, "colocate_baseline"), and both "_all_variants"}.
nlohmann::json compare_modes(const MeasuredRun& run,
                             const std::map<std::string, ModeSetup>& setups);

}  // namespace streamrl::planner
