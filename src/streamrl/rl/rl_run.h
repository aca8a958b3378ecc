// `streamrl train`: GRPO from a warm-started policy on a task's prompts, in one of the four modes
// on one code path (docs/architecture.md):
//   colocate  generate the whole batch, then train, on the same cores and module (verl-like);
//   disagg    generator and trainer on separate cores; the trainer waits for the full batch;
//   stream    as disagg, but per-sample work runs on arrival and each complete GRPO group joins a
//             dynamic batch that is forwarded/backwarded as soon as a token budget is buffered;
//   async     as stream, and generation of iteration k runs with weights k-1 while iteration k-1
//             trains; samples staler than async.max_staleness are refused.
// Runs are resumable from their checkpoints (colocate/disagg/stream with identical metrics).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/rl/rl_run_config.h"

namespace streamrl::rl {

// Runs (or resumes) training. Returns {"accuracy_before", "accuracy_after", "iterations",
// "checkpoint", "minutes", ...}. Throws RuntimeFailure on a non-finite loss (the last good
// checkpoint is kept and named in the message).
nlohmann::json run_rl(const RlRunConfig& config, const std::string& resolved_config_yaml);

}  // namespace streamrl::rl
