#include "streamrl/planner/pipeline_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"
#include "streamrl/pipeline/dynamic_schedule.h"
#include "streamrl/pipeline/validate.h"

namespace streamrl::planner {
namespace {

using pipeline::MicroBatch;

// `layers` identical layers: 1 us per token and 1 ns per squared length forward, backward
// twice that, one activation byte per token and layer; 10 bytes per token over a 1 GB/s link.
PipelineProfile uniform_profile(int layers) {
  PipelineProfile p;
  p.layers.assign(layers, {1e-6, 1e-9, 2e-6, 2e-9, 1});
  p.boundary_bytes_per_token = 10, p.link_bytes_per_s = 1e9, p.link_latency_s = 1e-5;
  return p;
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// One long-tailed batch per trial, planned under the static baseline's own peak activation
// memory: the baseline cuts M = 2P micro-batches of equal sample count and runs (interleaved)
// 1F1B; the plan must be no slower, within the budget, and faster on average.
TEST(PipelinePlan, DynamicBeatsStaticOneFOneBOnLongTailedBatches) {
  std::mt19937_64 rng(77);
  double planned_sum = 0, greedy_sum = 0;
  int n = 0, dynamic_chosen = 0;
  for (int P : {2, 4, 8}) {
    for (int V : {1, 2}) {
      const PipelineProfile profile = uniform_profile(2 * P * V);
      const pipeline::Partition partition =
          pipeline::partition_layers(std::vector<double>(2 * P * V, 1.0), P, V);
      for (int trial = 0; trial < 12; ++trial, ++n) {
        const std::string where = "P=" + std::to_string(P) + " V=" + std::to_string(V) + " trial " +
                                  std::to_string(trial);
        const std::vector<int64_t> lengths = pipeline::test_inputs::long_tailed_lengths(rng, 64);
        PipelinePlanOptions o;
        o.token_cost = {1.0, 1e-3};
        int64_t total = 0;
        for (int64_t l : lengths) total += l;
        o.target_tokens = (total + 2 * P - 1) / (2 * P);
        o.static_micro_batches = 2 * P;
        o.max_candidates_per_split = 6, o.time_budget_s = 60;

        // The baseline, emulated here from scratch.
        const std::vector<MicroBatch> fixed = pipeline::split_static(lengths, 2 * P, o.token_cost);
        const PipelineEmulation base =
            emulate_pipeline(pipeline::interleaved_one_f_one_b(P, V, 2 * P),
                             pipeline_op_costs(profile, partition, fixed));
        o.activation_budget_bytes = max_of(base.peak_activation_bytes);

        PipelineEmulator emulator;
        const PipelinePlan plan = plan_pipeline(lengths, profile, partition, o, emulator);
        EXPECT_NEAR(plan.static_step_s, base.step_s, 1e-9 * base.step_s) << where;
        EXPECT_LE(plan.emulation.step_s, base.step_s * (1 + 1e-9)) << where;
        ASSERT_EQ(pipeline::validate(plan.schedule), "") << where;

        // The plan's own figures, recomputed: every sample once, the step, the memory.
        std::vector<int> seen(lengths.size(), 0);
        for (const MicroBatch& mb : plan.micro_batches) {
          for (int i : mb.samples) ++seen[i];
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(lengths.size()));
        const pipeline::OpCosts costs = pipeline_op_costs(profile, partition, plan.micro_batches);
        EXPECT_NEAR(emulate_pipeline(plan.schedule, costs).step_s, plan.emulation.step_s,
                    1e-9 * base.step_s);
        EXPECT_LE(pipeline::test_inputs::peak_held_bytes(plan.schedule, costs),
                  o.activation_budget_bytes)
            << where;
        planned_sum += plan.emulation.step_s / base.step_s;
        dynamic_chosen += plan.schedule.name == "dynamic";

        // The greedy dual-queue schedule alone on the balanced split, same budget.
        const std::vector<MicroBatch> balanced =
            pipeline::split_balanced(lengths, {o.token_cost, o.target_tokens, 0, P});
        const pipeline::OpCosts bc = pipeline_op_costs(profile, partition, balanced);
        const pipeline::DynamicPlan greedy =
            pipeline::dynamic_schedule(bc, {{}, o.activation_budget_bytes});
        greedy_sum += emulate_pipeline(greedy.schedule, bc).step_s / base.step_s;
      }
    }
  }
  RecordProperty("planned_over_static", std::to_string(planned_sum / n));
  RecordProperty("greedy_over_static", std::to_string(greedy_sum / n));
  RecordProperty("dynamic_chosen", std::to_string(dynamic_chosen) + " of " + std::to_string(n));
  // Strictly faster on average, by a margin, and mostly thanks to the dynamic schedule.
  EXPECT_LT(planned_sum / n, 0.9);
  EXPECT_LT(greedy_sum / n, 0.95);
  EXPECT_GT(dynamic_chosen, n / 2);
}

TEST(PipelinePlan, ReusesTheEmulatorsCacheAcrossBatches) {
  std::mt19937_64 rng(3);
  const PipelineProfile profile = uniform_profile(8);
  const pipeline::Partition partition = pipeline::partition_by_count(8, 4);
  const std::vector<int64_t> lengths = pipeline::test_inputs::long_tailed_lengths(rng, 48);
  PipelinePlanOptions o;
  o.max_candidates_per_split = 5, o.time_budget_s = 60;
  PipelineEmulator emulator;
  const PipelinePlan first = plan_pipeline(lengths, profile, partition, o, emulator);
  const size_t entries = emulator.entries();
  const PipelinePlan again = plan_pipeline(lengths, profile, partition, o, emulator);
  EXPECT_EQ(emulator.entries(), entries);  // nothing new to simulate
  EXPECT_EQ(again.schedule.ops, first.schedule.ops);
  EXPECT_EQ(again.emulation.memo_misses, 0);
  EXPECT_EQ(again.candidates, first.candidates);
}

// For a padding executor every candidate is costed on its padded shape; the length-sorted split
// wastes far less than the arrival-order baseline on long-tailed batches, and the plan's op costs
// are those of the padded micro-batches it returns. Planned on a candidate cap, not a clock, the
// plan is the same every time (the pipeline trainer's stages rely on that).
TEST(PipelinePlan, PaddedPlansCostThePaddedShapeAndRepeat) {
  std::mt19937_64 rng(5);
  const PipelineProfile profile = uniform_profile(4);
  const pipeline::Partition partition = pipeline::partition_by_count(4, 2);
  PipelinePlanOptions o;
  o.padded = true, o.target_tokens = 2048, o.max_candidates_per_split = 6;
  o.time_budget_s = std::numeric_limits<double>::infinity();
  double speedups = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const std::vector<int64_t> lengths = pipeline::test_inputs::long_tailed_lengths(rng, 32, 100);
    PipelineEmulator emulator, other;
    const PipelinePlan plan = plan_pipeline(lengths, profile, partition, o, emulator);
    EXPECT_LE(plan.emulation.step_s, plan.static_step_s * (1 + 1e-9));
    for (const MicroBatch& mb : plan.micro_batches) {
      int64_t longest = 0;
      for (int i : mb.samples) longest = std::max(longest, lengths[i]);
      EXPECT_EQ(mb.tokens, longest * static_cast<int64_t>(mb.samples.size()));
    }
    const PipelinePlan again = plan_pipeline(lengths, profile, partition, o, other);
    EXPECT_EQ(again.schedule.ops, plan.schedule.ops);
    EXPECT_EQ(again.split, plan.split);
    speedups += plan.static_step_s / plan.emulation.step_s / 5;
  }
  EXPECT_GT(speedups, 1.3);
}

TEST(PipelinePlan, RejectsAnEmptyBatchOrAMismatchedProfile) {
  PipelineEmulator emulator;
  const pipeline::Partition partition = pipeline::partition_by_count(4, 2);
  EXPECT_THROW(plan_pipeline({}, uniform_profile(4), partition, {}, emulator), InputError);
  EXPECT_THROW(plan_pipeline({10, 20}, uniform_profile(5), partition, {}, emulator), InputError);
}

}  // namespace
}  // namespace streamrl::planner
