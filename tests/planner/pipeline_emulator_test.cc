#include "streamrl/planner/pipeline_emulator.h"

#include <gtest/gtest.h>

#include <random>

#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"
#include "streamrl/pipeline/dynamic_schedule.h"
#include "streamrl/pipeline/validate.h"

namespace streamrl::planner {
namespace {

using pipeline::DynamicOptions;
using pipeline::MicroBatch;
using pipeline::OpCosts;
using pipeline::Schedule;
namespace pt = pipeline::test_inputs;

// Every (stage, chunk) forward takes `f`, backward `b`, transfers take `t`.
OpCosts flat_costs(int stages, int chunks, int micro_batches, double f, double b, double t = 0) {
  OpCosts c = OpCosts::zeros(stages, chunks, micro_batches);
  std::fill(c.forward_s.begin(), c.forward_s.end(), f);
  std::fill(c.backward_s.begin(), c.backward_s.end(), b);
  std::fill(c.activation_bytes.begin(), c.activation_bytes.end(), 1.0);
  std::fill(c.transfer_s.begin(), c.transfer_s.end(), t);
  return c;
}

TEST(PipelineEmulator, OneFOneBHasTheTextbookBubble) {
  for (int P : {2, 4, 8}) {
    for (int M = 1; M <= 24; ++M) {
      const PipelineEmulation e =
          emulate_pipeline(pipeline::one_f_one_b(P, M), flat_costs(P, 1, M, 1.0, 2.0));
      // (M + P - 1) slots of forward + backward; each stage is busy for M of them.
      EXPECT_NEAR(e.step_s, (M + P - 1) * 3.0, 1e-9) << "P=" << P << " M=" << M;
      EXPECT_NEAR(e.bubble_ratio, (P - 1.0) / (M + P - 1.0), 1e-12) << "P=" << P << " M=" << M;
      for (double busy : e.busy_s) EXPECT_NEAR(busy, 3.0 * M, 1e-9);
      // Stage s holds at most min(P - s, M) micro-batches.
      for (int s = 0; s < P; ++s) EXPECT_EQ(e.peak_activation_bytes[s], std::min(P - s, M));
    }
  }
}

TEST(PipelineEmulator, InterleavingDividesTheBubbleByTheChunkCount) {
  // Megatron's interleaved schedule: bubble (P-1)/(V*M + P-1) when M is a multiple of P and
  // each chunk costs 1/V of the stage.
  for (int P : {2, 4}) {
    for (int M : {P, 2 * P, 4 * P}) {
      const int V = 2;
      const PipelineEmulation e = emulate_pipeline(pipeline::interleaved_one_f_one_b(P, V, M),
                                                   flat_costs(P, V, M, 1.0 / V, 2.0 / V));
      EXPECT_NEAR(e.bubble_ratio, (P - 1.0) / (V * M + P - 1.0), 1e-9) << "P=" << P << " M=" << M;
    }
  }
}

TEST(PipelineEmulator, TransfersDelayTheReceiver) {
  // One micro-batch across two stages: F0, send, F1, B1, send, B0.
  const PipelineEmulation e =
      emulate_pipeline(pipeline::one_f_one_b(2, 1), flat_costs(2, 1, 1, 1.0, 2.0, 0.25));
  EXPECT_NEAR(e.step_s, 1 + 0.25 + 1 + 2 + 0.25 + 2, 1e-12);
  ASSERT_EQ(e.timeline.size(), 4u);
  EXPECT_EQ(e.timeline[2].stage, 1);
  EXPECT_NEAR(e.timeline[2].start_s, 1.25, 1e-12);
  EXPECT_NEAR(e.timeline[1].start_s, 4.5, 1e-12);  // stage 0's backward
}

TEST(PipelineEmulator, UnequalMicroBatchesByHand) {
  // P = 2, 1F1B, micro-batch 0 costs 1 + 2 per stage, micro-batch 1 costs 3 + 6.
  OpCosts c = flat_costs(2, 1, 2, 0, 0);
  for (int s = 0; s < 2; ++s) {
    c.forward_s[c.index(s, 0, 0)] = 1, c.backward_s[c.index(s, 0, 0)] = 2;
    c.forward_s[c.index(s, 0, 1)] = 3, c.backward_s[c.index(s, 0, 1)] = 6;
  }
  // Stage 1: F0 [1,2] B0 [2,4] F1 [4,7] B1 [7,13]; stage 0: F0 [0,1] F1 [1,4], then B0 [4,6] and
  // B1 [13,19], each waiting for stage 1's.
  const PipelineEmulation e = emulate_pipeline(pipeline::one_f_one_b(2, 2), c);
  EXPECT_NEAR(e.step_s, 19, 1e-12);
  EXPECT_NEAR(e.timeline[2].start_s, 4, 1e-12);  // stage 0's B0 waits for stage 1's B0 at 4
  EXPECT_NEAR(e.bubble_ratio, 1 - 24.0 / 38, 1e-12);
}

TEST(PipelineEmulator, CostsFromAProfile) {
  PipelineProfile profile;
  for (int l = 0; l < 4; ++l) {
    profile.layers.push_back({1e-3 * (l + 1), 1e-6, 2e-3 * (l + 1), 2e-6, 10});
  }
  profile.boundary_bytes_per_token = 100, profile.link_bytes_per_s = 1e6,
  profile.link_latency_s = 1e-3;
  const pipeline::Partition part = pipeline::partition_by_count(4, 2);  // layers {0,1} {2,3}
  const std::vector<MicroBatch> mbs = pipeline::split_static({30, 10, 20}, 2);  // {30,10} {20}
  const OpCosts c = pipeline_op_costs(profile, part, mbs);
  // Stage 1 holds layers 2 and 3: (3 + 4) * 1e-3 per token, 2 * 1e-6 per squared length.
  EXPECT_NEAR(c.forward(1, 0, 0), 7e-3 * 40 + 2e-6 * (900 + 100), 1e-12);
  EXPECT_NEAR(c.backward(0, 0, 1), 6e-3 * 20 + 4e-6 * 400, 1e-12);
  EXPECT_NEAR(c.activation(0, 0, 0), 2 * 10 * 40, 1e-12);
  EXPECT_NEAR(c.transfer_s[1], 1e-3 + 100 * 20 / 1e6, 1e-12);
  profile.layers.pop_back();
  EXPECT_THROW(pipeline_op_costs(profile, part, mbs), InputError);
}

TEST(PipelineEmulator, RejectsAnInvalidSchedule) {
  Schedule s = pipeline::one_f_one_b(2, 2);
  std::swap(s.ops[1][0], s.ops[1][1]);  // stage 1 runs B0 before F0
  try {
    emulate_pipeline(s, flat_costs(2, 1, 2, 1, 1));
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 op 0 (B mb 0 chunk 0) runs before"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(emulate_pipeline(pipeline::one_f_one_b(2, 2), flat_costs(2, 1, 3, 1, 1)),
               InputError);
}

// The memoised emulator, one instance across many candidates and batches, against a fresh
// simulation of each.
TEST(PipelineEmulator, MemoisedRunsEqualFreshSimulations) {
  std::mt19937_64 rng(31);
  PipelineEmulator memo;
  int64_t hits = 0;
  for (int batch = 0; batch < 40; ++batch) {
    const int P = 2 << (batch % 3), V = 1 + (batch / 3) % 2;
    // Repeat some batches exactly, as a search revisiting candidates would.
    std::mt19937_64 batch_rng(batch % 10);
    const std::vector<MicroBatch> mbs =
        pipeline::split_balanced(pt::long_tailed_lengths(batch_rng, 80), {{1.0, 1e-3}, 1500, 0});
    const OpCosts costs = pt::uniform_layer_costs(mbs, P, V);
    const int M = static_cast<int>(mbs.size());
    std::vector<Schedule> candidates;
    if (V == 1 || M <= P || M % P == 0) {
      candidates.push_back(pipeline::interleaved_one_f_one_b(P, V, M));
    }
    DynamicOptions o;
    for (int m = 0; m < M; ++m) o.order.push_back(m);
    for (int k = 0; k < 3; ++k) {
      candidates.push_back(pipeline::dynamic_schedule(costs, o).schedule);
      std::shuffle(o.order.begin(), o.order.end(), rng);
    }
    for (const Schedule& s : candidates) {
      const PipelineEmulation fresh = emulate_pipeline(s, costs);
      const PipelineEmulation m = memo.run(s, costs);
      ASSERT_EQ(m.timeline.size(), fresh.timeline.size());
      EXPECT_NEAR(m.step_s, fresh.step_s, 1e-9 * fresh.step_s);
      EXPECT_NEAR(m.bubble_ratio, fresh.bubble_ratio, 1e-9);
      EXPECT_EQ(m.peak_activation_bytes, fresh.peak_activation_bytes);
      for (size_t i = 0; i < fresh.timeline.size(); ++i) {
        EXPECT_EQ(m.timeline[i].op, fresh.timeline[i].op);
        EXPECT_NEAR(m.timeline[i].start_s, fresh.timeline[i].start_s, 1e-9 * fresh.step_s);
        EXPECT_NEAR(m.timeline[i].end_s, fresh.timeline[i].end_s, 1e-9 * fresh.step_s);
      }
      hits += m.memo_hits;
      // A second run of the same schedule is all cache.
      const PipelineEmulation again = memo.run(s, costs);
      EXPECT_EQ(again.memo_misses, 0);
      EXPECT_GT(again.memo_hits, 0);
      EXPECT_EQ(again.step_s, m.step_s);
    }
  }
  EXPECT_GT(hits, 0);  // the repeated batches reuse segments on their first run too
}

TEST(PipelineEmulator, TheDynamicPlannersOwnTimingMatchesTheEmulator) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 30; ++trial) {
    const int P = 2 << (trial % 3), V = 1 + (trial / 3) % 2;
    const std::vector<MicroBatch> mbs =
        pipeline::split_balanced(pt::long_tailed_lengths(rng, 64), {{1.0, 1e-3}, 2000, 0});
    const OpCosts costs = pt::uniform_layer_costs(mbs, P, V);
    const pipeline::DynamicPlan plan = pipeline::dynamic_schedule(costs);
    EXPECT_NEAR(emulate_pipeline(plan.schedule, costs).step_s, plan.planned_step_s,
                1e-9 * plan.planned_step_s);
  }
}

TEST(PipelineEmulator, JsonAndTrace) {
  const PipelineEmulation e =
      emulate_pipeline(pipeline::one_f_one_b(2, 3), flat_costs(2, 1, 3, 1.0, 2.0));
  const nlohmann::json j = e.to_json(true);
  EXPECT_NEAR(j["step_s"].get<double>(), 12, 1e-12);
  EXPECT_EQ(j["busy_s"].size(), 2u);
  EXPECT_EQ(j["timeline"].size(), 12u);
  EXPECT_EQ(j["timeline"][0]["kind"], "F");
  EXPECT_FALSE(e.to_json().contains("timeline"));
  TraceWriter trace;
  e.add_to_trace(trace, 7);
  EXPECT_EQ(trace.size(), 12u + 3u);  // one span per op, a process name and two thread names
}

}  // namespace
}  // namespace streamrl::planner
