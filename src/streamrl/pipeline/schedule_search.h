// Search for the step's pipeline schedule, each candidate scored by a caller's evaluator (the
// planner's emulator), within a wall-clock budget: the cheap stand-in for DIP's MCTS over
// segment orderings. Candidates, in order: the static (interleaved) 1F1B order on these
// micro-batches when it applies and fits the memory budget, then the dynamic schedule with the
// given micro-batch order, longest first, shortest first, the P - 1 shortest then longest first,
// short at both ends with the long in the middle, then a hill climb (the best order so far with
// two micro-batches swapped, every third try a seeded random permutation) until the budget or
// the candidate cap is reached. The static order is a candidate so the plan is never worse than
// it on the same micro-batches.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "streamrl/pipeline/dynamic_schedule.h"

namespace streamrl::pipeline {

struct SearchOptions {
  DynamicOptions base;         // memory budget, and the given order
  double time_budget_s = 0.1;  // wall clock for the whole search; the fixed candidates always run
  int max_candidates = 64;     // including the fixed ones
  uint64_t seed = 0;           // random permutations
};

struct SearchResult {
  Schedule schedule;       // the best candidate
  double step_s = 0;       // its evaluated step time
  std::vector<int> order;  // its micro-batch order (empty for the static order)
  // "static" (1f1b or interleaved_1f1b), "given", "longest_first", "shortest_first" (always
  // tried), "fill_then_longest", "sandwich" (while under the cap), "swap" (the best order with
  // two micro-batches swapped) or "random"
  std::string candidate;
  int candidates = 0;  // evaluated
};

// Step time of a schedule (lower is better); called once per candidate, on the calling thread.
using ScheduleEvaluator = std::function<double(const Schedule&)>;

// Ties keep the earlier candidate. A micro-batch's length for the orderings is its summed
// forward and backward seconds over all stages and chunks. Throws as dynamic_schedule does.
SearchResult search_schedule(const OpCosts& costs, const SearchOptions& options,
                             const ScheduleEvaluator& evaluate);

}  // namespace streamrl::pipeline
