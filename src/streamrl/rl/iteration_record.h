// The metrics line of one RL iteration (metrics.jsonl, the report, TensorBoard): rewards,
// accuracy and lengths of the iteration's samples, the step's loss metrics, stage seconds and
// idle fractions, and what the loop's options add (ranker, dynamic sampling, curriculum).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "streamrl/dist/process_group.h"
#include "streamrl/rl/rl_loop.h"

namespace streamrl::rl {

struct IterationRecord {
  nlohmann::json json;
  double reward_mean = 0;  // over all ranks' samples
  double mean_length = 0;  // of this rank's samples
};

// One iteration's rewards, correct answers and samples summed over the ranks. With `group` a
// collective (every rank calls it once per iteration): call it inside the iteration's timed span,
// so that a link that drops during it shows in the iteration's time and collectives.
struct SampleTotals {
  double reward = 0, correct = 0, samples = 0;
};
SampleTotals sample_totals(const IterationStats& st, dist::ProcessGroup* group);

// Iteration `it` (0-based) that took `iteration_s`; `totals` from sample_totals. `group` (no
// collective here) names the trainer ranks.
IterationRecord iteration_record(const RlRunConfig& c, int64_t it, const IterationStats& st,
                                 const SampleTotals& totals, const UpdateResult& up,
                                 const RlLoop& loop, double iteration_s,
                                 const dist::ProcessGroup* group);

// The line of samples.jsonl for iteration step `done` (1-based), what the step emulator replays:
// {"step", "lengths", "zero_advantage"} per sample, grouped by prompt (the iteration's prompts in
// order, then the refills in the order they were submitted), and "released_after" per group: -1,
// or for a dynamic-sampling refill the position of the dropped group it replaced.
nlohmann::json sample_record(int64_t done, const IterationStats& st);

}  // namespace streamrl::rl
