#include "streamrl/planner/pipeline_plan_ahead.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "input_error.h"
#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

// As in pipeline_plan_test.cc: identical layers, 1 us per token and 1 ns per squared length
// forward, backward twice that; one activation byte per token and layer.
PipelineProfile plan_ahead_profile(int layers) {
  PipelineProfile p;
  p.layers.assign(layers, {1e-6, 1e-9, 2e-6, 2e-9, 1});
  p.boundary_bytes_per_token = 10, p.link_bytes_per_s = 1e9, p.link_latency_s = 1e-5;
  return p;
}

struct PlanAheadSetup {
  PipelineProfile profile;
  pipeline::Partition partition;
  PipelinePlanOptions options;
};

// P stages x V chunks of two layers each. `deterministic`: a fixed candidate count and a time
// budget it never reaches, so the plan does not depend on the machine's speed; otherwise the
// search runs until `budget_s`, which makes planning take a known, measurable time.
PlanAheadSetup plan_ahead_setup(int P, int V, bool deterministic, double budget_s = 60) {
  PlanAheadSetup s;
  s.profile = plan_ahead_profile(2 * P * V);
  s.partition = pipeline::partition_layers(std::vector<double>(2 * P * V, 1.0), P, V);
  s.options.token_cost = {1.0, 1e-3};
  s.options.target_tokens = 2048;
  s.options.static_micro_batches = 2 * P;
  s.options.max_candidates_per_split = deterministic ? 6 : 1 << 20;
  s.options.time_budget_s = budget_s;
  return s;
}

double plan_ahead_seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(PipelinePlanAhead, AsyncPlanEqualsSynchronousPlan) {
  std::mt19937_64 rng(5);
  for (int V : {1, 2}) {
    const PlanAheadSetup s = plan_ahead_setup(4, V, /*deterministic=*/true);
    PipelinePlanAhead ahead(s.profile, s.partition, s.options);
    PipelineEmulator emulator;
    for (int batch = 0; batch < 3; ++batch) {
      const std::vector<int64_t> lengths = pipeline::test_inputs::long_tailed_lengths(rng, 64);
      ahead.submit(batch, lengths);
      const PipelinePlan want = plan_pipeline(lengths, s.profile, s.partition, s.options, emulator);
      const PipelinePlan got = ahead.take(batch);
      EXPECT_EQ(got.schedule.ops, want.schedule.ops) << "V=" << V << " batch " << batch;
      EXPECT_EQ(got.schedule.name, want.schedule.name);
      EXPECT_EQ(got.split, want.split);
      EXPECT_NEAR(got.emulation.step_s, want.emulation.step_s, 1e-12 * want.emulation.step_s);
      EXPECT_NEAR(got.static_step_s, want.static_step_s, 1e-12 * want.static_step_s);
      ASSERT_TRUE(ahead.timing(batch).has_value());
    }
    EXPECT_EQ(ahead.pending(), 0u);
  }
}

// A trainer knows the batch it is about to run by its lengths: take_matching() returns that
// batch's plan, drops the batches submitted before it (they will not run), keeps later ones,
// and leaves everything pending when nothing matches.
TEST(PipelinePlanAhead, TakeMatchingDropsOnlyEarlierBatches) {
  std::mt19937_64 rng(12);
  const PlanAheadSetup s = plan_ahead_setup(2, 1, /*deterministic=*/true);
  PipelinePlanAhead ahead(s.profile, s.partition, s.options);
  PipelineEmulator emulator;
  std::vector<std::vector<int64_t>> batches;
  for (int64_t id = 1; id <= 3; ++id) {
    batches.push_back(pipeline::test_inputs::long_tailed_lengths(rng, 32));
    ahead.submit(id, batches.back());
  }
  std::vector<int64_t> other = batches[0];
  other.push_back(7);
  EXPECT_FALSE(ahead.take_matching(other).has_value());
  EXPECT_EQ(ahead.pending(), 3u);

  int64_t id = 0;
  const std::optional<PipelinePlan> got = ahead.take_matching(batches[1], &id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(id, 2);
  const PipelinePlan want = plan_pipeline(batches[1], s.profile, s.partition, s.options, emulator);
  EXPECT_EQ(got->schedule.ops, want.schedule.ops);
  EXPECT_EQ(ahead.pending(), 1u);  // batch 1 dropped, batch 3 kept
  EXPECT_THROW(ahead.take(1), InputError);
  EXPECT_FALSE(ahead.take_matching(batches[0]).has_value());
  ASSERT_TRUE(ahead.take_matching(batches[2], &id).has_value());
  EXPECT_EQ(id, 3);
  EXPECT_EQ(ahead.pending(), 0u);
}

// Options and a profile given with a batch replace the constructor's for that batch only (a
// trainer hands each batch the profile refitted so far).
TEST(PipelinePlanAhead, PerBatchOptionsApplyToTheirBatch) {
  std::mt19937_64 rng(10);
  const PlanAheadSetup s = plan_ahead_setup(2, 1, /*deterministic=*/true);
  PlanAheadSetup other = s;
  other.options.static_micro_batches = 8;
  PipelinePlanAhead ahead(s.profile, s.partition, s.options);
  PipelineEmulator emulator;
  const std::vector<int64_t> lengths = pipeline::test_inputs::long_tailed_lengths(rng, 64);
  ahead.submit(1, lengths, other.options);
  ahead.submit(2, lengths);
  const PipelinePlan want1 =
      plan_pipeline(lengths, s.profile, s.partition, other.options, emulator);
  const PipelinePlan want2 = plan_pipeline(lengths, s.profile, s.partition, s.options, emulator);
  EXPECT_NEAR(ahead.take(1).static_step_s, want1.static_step_s, 1e-12 * want1.static_step_s);
  EXPECT_NEAR(ahead.take(2).static_step_s, want2.static_step_s, 1e-12 * want2.static_step_s);
  EXPECT_NE(want1.static_step_s, want2.static_step_s);  // the two options differ in effect

  PipelineProfile slower = s.profile;
  for (PipelineLayerProfile& l : slower.layers) l.forward_per_token_s *= 3;
  ahead.submit(3, lengths, std::nullopt, slower);
  ahead.submit(4, lengths);
  const PipelinePlan want3 = plan_pipeline(lengths, slower, s.partition, s.options, emulator);
  EXPECT_NEAR(ahead.take(3).static_step_s, want3.static_step_s, 1e-12 * want3.static_step_s);
  EXPECT_NEAR(ahead.take(4).static_step_s, want2.static_step_s, 1e-12 * want2.static_step_s);
  EXPECT_GT(want3.static_step_s, 1.1 * want2.static_step_s);
}

// The caller "trains" (sleeps) well past the planning time before it asks: all of planning is
// hidden and take() returns at once.
TEST(PipelinePlanAhead, TakeAfterLongerWorkReportsPlanningHidden) {
  std::mt19937_64 rng(6);
  const PlanAheadSetup s = plan_ahead_setup(4, 2, /*deterministic=*/false, /*budget_s=*/0.05);
  PipelinePlanAhead ahead(s.profile, s.partition, s.options);
  ahead.submit(1, pipeline::test_inputs::long_tailed_lengths(rng, 128));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ahead.take(1);
  const PlanAheadTiming t = *ahead.timing(1);
  EXPECT_GT(t.planning_s, 0);
  EXPECT_LT(t.planning_s, 0.5);  // the search's budget plus slack
  EXPECT_GT(t.hidden_share(), 0.999);
  EXPECT_LT(t.blocked_s, 0.02);
}

// Asked for right away, take() waits for (nearly) all of planning and none of it is hidden.
TEST(PipelinePlanAhead, TakeRightAwayReportsTheBlockedTime) {
  std::mt19937_64 rng(7);
  const PlanAheadSetup s = plan_ahead_setup(4, 2, /*deterministic=*/false, /*budget_s=*/0.3);
  PipelinePlanAhead ahead(s.profile, s.partition, s.options);
  const auto t0 = std::chrono::steady_clock::now();
  ahead.submit(1, pipeline::test_inputs::long_tailed_lengths(rng, 128));
  ahead.take(1);
  const double wall = plan_ahead_seconds_since(t0);
  const PlanAheadTiming t = *ahead.timing(1);
  EXPECT_GT(t.planning_s, 0.1);  // the search runs to its 0.3 s budget
  EXPECT_LT(t.hidden_s, 0.05 * t.planning_s);
  EXPECT_GT(t.blocked_s, 0.95 * t.planning_s);
  EXPECT_LE(t.blocked_s, wall);
}

TEST(PipelinePlanAhead, UnknownBatchAndTimeoutThrow) {
  std::mt19937_64 rng(8);
  const PlanAheadSetup s = plan_ahead_setup(4, 2, /*deterministic=*/false, /*budget_s=*/0.3);
  PlanAheadOptions ahead_options;
  ahead_options.take_timeout_s = 0.001;
  PipelinePlanAhead ahead(s.profile, s.partition, s.options, ahead_options);
  EXPECT_NE(testing_util::input_error([&] { ahead.take(42); }).find("batch 42 was never submitted"),
            std::string::npos);

  ahead.submit(1, pipeline::test_inputs::long_tailed_lengths(rng, 128));
  EXPECT_NE(testing_util::input_error([&] {
              ahead.submit(1, {10, 20});
            }).find("already submitted"),
            std::string::npos);
  // The configured 1 ms, then an explicit one: both time out; the batch is still pending.
  EXPECT_THROW(ahead.take(1), TimeoutError);
  EXPECT_THROW(ahead.take(1, 0.001), TimeoutError);
  EXPECT_EQ(ahead.pending(), 1u);
  EXPECT_FALSE(ahead.timing(1).has_value());
  // A long enough wait then gets it, and a second take() of the same batch is an unknown batch.
  EXPECT_GT(ahead.take(1, 30).emulation.step_s, 0);
  EXPECT_EQ(ahead.pending(), 0u);
  EXPECT_NE(testing_util::input_error([&] { ahead.take(1); }).find("already taken"),
            std::string::npos);
}

TEST(PipelinePlanAhead, PlanningErrorSurfacesFromTake) {
  const PlanAheadSetup s = plan_ahead_setup(2, 1, /*deterministic=*/true);
  PipelinePlanAhead ahead(s.profile, s.partition, s.options);
  ahead.submit(1, {});
  ahead.submit(2, {100, 200, 300, 400});
  EXPECT_NE(testing_util::input_error([&] { ahead.take(1); }).find("no sequences"),
            std::string::npos);
  ASSERT_TRUE(ahead.timing(1).has_value());
  // The thread survives the error and plans the next batch.
  EXPECT_GT(ahead.take(2).emulation.step_s, 0);
}

// Destroyed with a batch being planned and more queued: joins without waiting for the queue.
TEST(PipelinePlanAhead, DestructorJoinsWithBatchesPending) {
  std::mt19937_64 rng(9);
  const PlanAheadSetup s = plan_ahead_setup(4, 2, /*deterministic=*/false, /*budget_s=*/0.1);
  const auto t0 = std::chrono::steady_clock::now();
  {
    PipelinePlanAhead ahead(s.profile, s.partition, s.options);
    for (int b = 0; b < 10; ++b) {
      ahead.submit(b, pipeline::test_inputs::long_tailed_lengths(rng, 64));
      // Let batch 0 start, so the destructor meets one in flight.
      if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_LT(plan_ahead_seconds_since(t0), 0.9);  // the batch in flight (~0.1 s), not all ten
}

}  // namespace
}  // namespace streamrl::planner
