// The measured half of `bench pipeline`: PP = 2 with real processes (`streamrl launch`, one core
// each), static 1F1B against the per-batch dynamic plan on long-tailed batches from the default
// task, interleaved over rounds, and the emulator's prediction of each step against the
// measurement. The profile the plans and the emulator use is measured on rank 0 first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "registry.h"

namespace streamrl::bench {

inline constexpr const char* kPipelineWorkerEnv = "STREAMRL_BENCH_PIPELINE_WORKER";

// Prompt + demonstration characters (one token each with the char tokenizer) of `count` training
// problems of the default task drawn with `seed`, times `scale`: long-tailed batches.
std::vector<int64_t> draw_task_lengths(uint64_t seed, int count, int64_t scale);

// Launches the two ranks and returns rank 0's figures.
nlohmann::json measure_pipeline_pp2(const BenchOptions& options);

// One rank's part (the launched copies of `bench pipeline` run this); rank 0 writes `out_path`.
nlohmann::json run_pipeline_pp2_worker(const BenchOptions& options, const std::string& out_path);

}  // namespace streamrl::bench
