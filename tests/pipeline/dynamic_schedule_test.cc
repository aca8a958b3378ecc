#include "streamrl/pipeline/dynamic_schedule.h"

#include <gtest/gtest.h>

#include <random>

#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"
#include "streamrl/pipeline/schedule_search.h"
#include "streamrl/pipeline/validate.h"

namespace streamrl::pipeline {
namespace {

std::vector<MicroBatch> equal_micro_batches(int count, int64_t tokens) {
  return split_static(std::vector<int64_t>(count, tokens), count);
}

TEST(DynamicSchedule, EntersMicroBatchesInTheGivenOrder) {
  const OpCosts costs = test_inputs::uniform_layer_costs(equal_micro_batches(4, 100), 2, 1);
  const DynamicPlan plan = dynamic_schedule(costs, {{2, 0, 3, 1}, 0});
  std::vector<int> entered;
  for (const Op& op : plan.schedule.ops[0]) {
    if (op.kind == OpKind::kForward) entered.push_back(op.micro_batch);
  }
  EXPECT_EQ(entered, (std::vector<int>{2, 0, 3, 1}));
  EXPECT_EQ(plan.schedule.name, "dynamic");
}

TEST(DynamicSchedule, ABackwardReadyNowGoesBeforeAForward) {
  // Two stages, equal micro-batches, free transfers: stage 1 gets micro-batch 0's forward and
  // then its own backward, ready at the same time as micro-batch 1's forward.
  const OpCosts costs =
      test_inputs::uniform_layer_costs(equal_micro_batches(3, 100), 2, 1, 1, 1e-3, 0, 0, 0);
  const DynamicPlan plan = dynamic_schedule(costs);
  const std::vector<Op>& last = plan.schedule.ops[1];
  ASSERT_GE(last.size(), 2u);
  EXPECT_EQ(last[0], (Op{OpKind::kForward, 0, 0}));
  EXPECT_EQ(last[1], (Op{OpKind::kBackward, 0, 0}));
}

TEST(DynamicSchedule, HoldsNoMoreActivationsThanTheBudget) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 120; ++trial) {
    const int P = 2 << (trial % 3), V = 1 + (trial / 3) % 2;
    const std::vector<int64_t> lengths = test_inputs::long_tailed_lengths(rng, 96);
    const std::vector<MicroBatch> mbs = split_balanced(lengths, {{1.0, 1e-3}, 1024, 2048});
    const OpCosts costs = test_inputs::uniform_layer_costs(mbs, P, V, 2);
    // Room for 1 to 4 of the largest micro-batches (all chunks) on a stage.
    double largest = 0;
    for (const MicroBatch& mb : mbs) largest = std::max(largest, 2.0 * V * mb.tokens);
    const double budget = largest * (1 + trial % 4);
    const DynamicPlan plan = dynamic_schedule(costs, {{}, budget});
    ASSERT_EQ(validate(plan.schedule), "") << "trial " << trial;
    EXPECT_LE(test_inputs::peak_held_bytes(plan.schedule, costs), budget) << "trial " << trial;
  }
}

TEST(DynamicSchedule, AMicroBatchOverTheBudgetStillRunsAlone) {
  const OpCosts costs = test_inputs::uniform_layer_costs(equal_micro_batches(3, 1000), 2, 1);
  const DynamicPlan plan = dynamic_schedule(costs, {{}, 10});
  EXPECT_EQ(validate(plan.schedule), "");
  // One micro-batch in flight at a time: every forward on stage 0 follows the previous backward.
  EXPECT_EQ(test_inputs::peak_held_bytes(plan.schedule, costs), 1000);
}

TEST(DynamicSchedule, RejectsABadOrderOrCostTable) {
  const OpCosts costs = test_inputs::uniform_layer_costs(equal_micro_batches(3, 10), 2, 1);
  EXPECT_THROW(dynamic_schedule(costs, {{0, 1}, 0}), InputError);
  EXPECT_THROW(dynamic_schedule(costs, {{0, 1, 1}, 0}), InputError);
  OpCosts bad = costs;
  bad.transfer_s.pop_back();
  EXPECT_THROW(dynamic_schedule(bad), InputError);
}

TEST(SearchSchedule, ReturnsTheBestCandidateItEvaluated) {
  std::mt19937_64 rng(9);
  const std::vector<MicroBatch> mbs =
      split_balanced(test_inputs::long_tailed_lengths(rng, 64), {{1.0, 1e-3}, 1500, 0, 4});
  ASSERT_EQ(mbs.size() % 4, 0u);
  const OpCosts costs = test_inputs::uniform_layer_costs(mbs, 4, 2);
  // Scores a candidate by the scheduler's own prediction for the order its stage 0 enters
  // micro-batches in (the planner passes its emulator); the static order scores a constant.
  std::vector<double> seen;
  std::vector<Schedule> schedules;
  SearchOptions o;
  o.max_candidates = 12, o.time_budget_s = 60, o.seed = 3;
  const SearchResult r = search_schedule(costs, o, [&](const Schedule& s) {
    EXPECT_EQ(validate(s), "");
    schedules.push_back(s);
    if (s.name != "dynamic") {
      seen.push_back(1e9);
      return seen.back();
    }
    DynamicOptions d;
    for (const auto& op : s.ops[0]) {
      if (op.kind == OpKind::kForward && op.chunk == 0) d.order.push_back(op.micro_batch);
    }
    seen.push_back(dynamic_schedule(costs, d).planned_step_s);
    return seen.back();
  });
  EXPECT_EQ(r.candidates, 12);
  ASSERT_EQ(seen.size(), 12u);
  EXPECT_EQ(schedules[0].name, "interleaved_1f1b");  // the static order goes first
  const size_t best = std::min_element(seen.begin(), seen.end()) - seen.begin();
  EXPECT_EQ(r.step_s, seen[best]);
  EXPECT_EQ(r.schedule.ops, schedules[best].ops);
  DynamicOptions again;
  again.order = r.order;
  EXPECT_EQ(dynamic_schedule(costs, again).schedule.ops, r.schedule.ops);
}

TEST(SearchSchedule, LeavesOutTheStaticOrderOverTheMemoryBudget) {
  const OpCosts costs = test_inputs::uniform_layer_costs(equal_micro_batches(8, 100), 4, 1);
  // 1F1B holds 4 micro-batches on stage 0; a budget of 2 leaves only dynamic candidates.
  SearchOptions o;
  o.base.activation_budget_bytes = 200;
  o.max_candidates = 4;
  std::vector<std::string> names;
  const SearchResult r = search_schedule(costs, o, [&](const Schedule& s) {
    names.push_back(s.name);
    return 1.0;
  });
  EXPECT_EQ(names, (std::vector<std::string>{"dynamic", "dynamic", "dynamic", "dynamic"}));
  EXPECT_EQ(r.candidate, "given");
  o.base.activation_budget_bytes = 400;
  names.clear();
  EXPECT_EQ(search_schedule(costs, o,
                            [&](const Schedule& s) {
                              names.push_back(s.name);
                              return 1.0;
                            })
                .candidate,
            "static");
  EXPECT_EQ(names.front(), "1f1b");
  EXPECT_THROW(search_schedule(costs, {{{0, 0}, 0}}, [](const Schedule&) { return 1.0; }),
               InputError);
}

}  // namespace
}  // namespace streamrl::pipeline
