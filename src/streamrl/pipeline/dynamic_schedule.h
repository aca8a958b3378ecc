// The per-batch dynamic pipeline schedule (PipeWeaver/DIP's stage interleaving, arXiv
// 2504.14145): a greedy list scheduler over the batch's own op costs. Each stage keeps a queue of
// forwards and a queue of backwards whose inputs have arrived (or will, at a known time); the op
// that can start earliest runs next, so a stage waiting on a long micro-batch fills the gap with
// whatever else is ready. Among ops that can start at the same time, the stage alternates kinds
// as 1F1B does (a backward after a forward, a forward after a backward: DIP's rule when both
// queues are ready; strict backward-first starved the next stages of forwards, e.g. 64 vs 61
// time units on 4 stages x 2 chunks x 8 equal micro-batches), then backwards by micro-batch
// priority, forwards deeper chunk first and then by priority. How it departs from the paper:
//  1. no MCTS over module rankings: schedule_search.h tries micro-batch orderings instead;
//  2. one memory rule instead of the per-rank ILP: an activation budget per stage, with a
//     micro-batch's activations for all its chunks on a stage reserved when it enters the stage,
//     so a micro-batch that has entered never waits on memory (no memory deadlock).
#pragma once

#include <vector>

#include "streamrl/pipeline/op_costs.h"
#include "streamrl/pipeline/schedule.h"

namespace streamrl::pipeline {

struct DynamicOptions {
  // Micro-batch priority, highest first: the order in which micro-batches enter the pipeline
  // and the tie-break between ready ops. Empty: 0, 1, ..., M-1.
  std::vector<int> order;
  // Activation bytes each stage may hold (0: no limit). A micro-batch that does not fit waits to
  // enter the stage; one alone on a stage always enters, so an over-budget micro-batch still runs.
  double activation_budget_bytes = 0;
};

struct DynamicPlan {
  Schedule schedule;          // name "dynamic"
  double planned_step_s = 0;  // the step time the scheduler's own timing predicts
};

// Throws InputError when costs is empty or mis-sized, or order is not a permutation of 0..M-1.
DynamicPlan dynamic_schedule(const OpCosts& costs, const DynamicOptions& options = {});

}  // namespace streamrl::pipeline
