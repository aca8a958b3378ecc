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

// Iteration `it` (0-based) that took `iteration_s`. With `group`, reward and accuracy are summed
// over the ranks (a collective: every rank calls this once per iteration).
IterationRecord iteration_record(const RlRunConfig& c, int64_t it, const IterationStats& st,
                                 const UpdateResult& up, const RlLoop& loop, double iteration_s,
                                 dist::ProcessGroup* group);

}  // namespace streamrl::rl
