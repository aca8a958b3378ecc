#include "streamrl/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <random>

#include "pipeline/long_tail.h"
#include "streamrl/core/errors.h"
#include "streamrl/pipeline/dynamic_schedule.h"
#include "streamrl/pipeline/validate.h"

namespace streamrl::pipeline {
namespace {

Op F(int mb, int chunk = 0) { return {OpKind::kForward, mb, chunk}; }
Op B(int mb, int chunk = 0) { return {OpKind::kBackward, mb, chunk}; }

TEST(OneFOneB, WarmUpSteadyAndCoolDown) {
  const Schedule s = one_f_one_b(3, 4);
  ASSERT_EQ(s.ops.size(), 3u);
  EXPECT_EQ(s.ops[0], (std::vector<Op>{F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)}));
  EXPECT_EQ(s.ops[1], (std::vector<Op>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  EXPECT_EQ(s.ops[2], (std::vector<Op>{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
  // Fewer micro-batches than stages: all forwards first.
  EXPECT_EQ(one_f_one_b(4, 2).ops[0], (std::vector<Op>{F(0), F(1), B(0), B(1)}));
  EXPECT_THROW(one_f_one_b(0, 2), InputError);
}

TEST(InterleavedOneFOneB, MegatronOrder) {
  // P = 2, V = 2, M = 2: one group; stage 0 warms up with all 4 forwards, stage 1 with 2.
  const Schedule s = interleaved_one_f_one_b(2, 2, 2);
  EXPECT_EQ(s.ops[0], (std::vector<Op>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), B(0, 1), B(1, 1),
                                       B(0, 0), B(1, 0)}));
  EXPECT_EQ(s.ops[1], (std::vector<Op>{F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1),
                                       B(0, 0), B(1, 0)}));
  EXPECT_EQ(interleaved_one_f_one_b(3, 1, 4).ops, one_f_one_b(3, 4).ops);
  EXPECT_THROW(interleaved_one_f_one_b(8, 2, 10), InputError);
}

TEST(InterleavedOneFOneB, ValidForMultiplesOfTheStageCount) {
  for (int P : {2, 3, 4, 5, 8}) {
    for (int V : {2, 3, 4}) {
      for (int M = 1; M <= 4 * P; ++M) {
        if (M > P && M % P != 0) continue;
        EXPECT_EQ(validate(interleaved_one_f_one_b(P, V, M)), "") << P << " " << V << " " << M;
      }
    }
  }
}

TEST(Producer, FollowsVirtualStages) {
  Schedule s = interleaved_one_f_one_b(2, 2, 1);
  // Stage 1 chunk 0 is virtual stage 1; its forward reads stage 0 chunk 0 ...
  EXPECT_EQ(producer(s, 1, F(0, 0))->stage, 0);
  // ... stage 0 chunk 1 (virtual 2) reads stage 1 chunk 0 (virtual 1) ...
  EXPECT_EQ(producer(s, 0, F(0, 1))->op, F(0, 0));
  EXPECT_EQ(producer(s, 0, F(0, 1))->stage, 1);
  // ... the last virtual stage's backward reads its own forward, and the others the next one's
  // backward.
  EXPECT_EQ(producer(s, 1, B(0, 1))->op, F(0, 1));
  EXPECT_EQ(producer(s, 1, B(0, 0))->op, B(0, 1));
  EXPECT_EQ(producer(s, 1, B(0, 0))->stage, 0);
  EXPECT_FALSE(producer(s, 0, F(0, 0)).has_value());
}

// 200 random long-tailed batches: the static generators at a random micro-batch count and the
// dynamic one on balanced sub-micro-batches with a random order and memory budget.
TEST(Schedules, EveryGeneratorIsValidOnRandomLongTailedBatches) {
  std::mt19937_64 rng(2024);
  const int stage_counts[] = {2, 4, 8};
  for (int trial = 0; trial < 200; ++trial) {
    const int P = stage_counts[trial % 3], V = 1 + (trial / 3) % 2;
    const std::vector<int64_t> lengths =
        test_inputs::long_tailed_lengths(rng, 8 + static_cast<int>(rng() % 120));
    const int M = 1 + static_cast<int>(rng() % (3 * P));
    SCOPED_TRACE("trial " + std::to_string(trial) + ": P=" + std::to_string(P) +
                 " V=" + std::to_string(V) + " M=" + std::to_string(M));

    EXPECT_EQ(validate(one_f_one_b(P, M)), "");
    // Interleaving takes M <= P or a multiple of P.
    const int interleaved_m = M <= P ? M : M / P * P;
    EXPECT_EQ(validate(interleaved_one_f_one_b(P, V, interleaved_m)), "");

    const std::vector<MicroBatch> mbs =
        split_balanced(lengths, {{1.0, 1e-3}, 256 + static_cast<int64_t>(rng() % 4096), 0});
    const OpCosts costs = test_inputs::uniform_layer_costs(mbs, P, V);
    DynamicOptions o;
    o.order.resize(mbs.size());
    for (size_t i = 0; i < mbs.size(); ++i) o.order[i] = static_cast<int>(i);
    std::shuffle(o.order.begin(), o.order.end(), rng);
    if (trial % 2) o.activation_budget_bytes = V * 3000.0 * (1 + rng() % 4);
    const DynamicPlan plan = dynamic_schedule(costs, o);
    EXPECT_EQ(plan.schedule.micro_batches, static_cast<int>(mbs.size()));
    EXPECT_EQ(validate(plan.schedule), "");
  }
}

TEST(Schedules, StaticOnesKeepEveryLinkInOrder) {
  // What an in-order transport (NCCL) needs; the dynamic schedule needs tagged messages.
  for (int P : {2, 3, 4, 8}) {
    for (int M = 1; M <= 3 * P; ++M) {
      EXPECT_EQ(validate(one_f_one_b(P, M), {true}), "") << "P=" << P << " M=" << M;
    }
  }
  EXPECT_EQ(validate(interleaved_one_f_one_b(4, 2, 8), {true}), "");
}

}  // namespace
}  // namespace streamrl::pipeline
