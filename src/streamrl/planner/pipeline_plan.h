// The per-batch pipeline plan (PipeWeaver/DIP's online step, arXiv 2504.14145): given the
// batch's sequence lengths, pick the micro-batch split and the schedule with the shortest
// emulated step under the memory budget. Candidate splits are token-cost-balanced
// sub-micro-batches at four granularities (and length-sorted ones for padding executors), the
// finest again with a ramp of smaller ones for the fill and drain, and the static baseline's
// split; each is searched with pipeline::search_schedule on the memoised emulator. The baseline
// (static split, static order) is among the candidates, so a plan is never slower than it in the
// emulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/pipeline/partition.h"
#include "streamrl/pipeline/schedule.h"
#include "streamrl/planner/pipeline_emulator.h"

namespace streamrl::planner {

struct PipelinePlanOptions {
  pipeline::TokenCost token_cost;      // what the balanced split evens out
  int64_t target_tokens = 4096;        // per sub-micro-batch; finer splits try 1/2, 1/4, 1/8
  int64_t max_tokens = 0;              // activation cap per sub-micro-batch, tokens (0: none)
  int static_micro_batches = 0;        // the baseline's fixed count (0: 2 * stages)
  double activation_budget_bytes = 0;  // per stage (0: none); the baseline is held to it too
  // The executor pads each micro-batch to its longest sequence (ours does; packed-sequence
  // executors do not): every candidate, the baseline included, is costed on the padded shape,
  // and length-sorted splits (pipeline::split_sorted) join the candidates.
  bool padded = false;
  double time_budget_s = 0.1;         // wall clock for the whole plan
  int max_candidates_per_split = 16;  // schedules searched per split
  uint64_t seed = 0;
};

struct PipelinePlan {
  std::vector<pipeline::MicroBatch> micro_batches;
  pipeline::Schedule schedule;
  PipelineEmulation emulation;  // of `schedule` on `micro_batches`
  // "balanced", "sorted", "balanced_fine", "sorted_fine" (half the target), "balanced_finer",
  // "balanced_finest" (a quarter, an eighth), "tapered" (the eighth with smaller micro-batches at
  // both ends, pipeline::split_tapered) or "static"
  std::string split;
  std::string candidate;  // pipeline::SearchResult::candidate
  int candidates = 0;     // schedules evaluated over all splits
  // The baseline: static split, static (interleaved) 1F1B order, emulated. A baseline over the
  // memory budget is still reported, but only plans within it are chosen.
  double static_step_s = 0;
  double static_bubble_ratio = 0;
};

// Throws InputError on an empty batch, a profile that does not match the partition, or a
// static count that the interleaved order cannot run (see pipeline::interleaved_one_f_one_b).
PipelinePlan plan_pipeline(const std::vector<int64_t>& lengths, const PipelineProfile& profile,
                           const pipeline::Partition& partition, const PipelinePlanOptions& options,
                           PipelineEmulator& emulator);

}  // namespace streamrl::planner
