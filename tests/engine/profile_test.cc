// PTL profiling through real engine steps: one point per batch size and context that fits the
// model's positions, each a step of the engine itself (forward, sampling and bookkeeping).
#include "streamrl/engine/profile.h"

#include <gtest/gtest.h>

#include "engine_model.h"

namespace streamrl::engine {
namespace {

TEST(Profile, OnePointPerFittingBatchAndContext) {
  model::CausalLM lm = engine_model(11, 64);
  ProfileConfig pc;
  pc.batch_sizes = {1, 4};
  pc.contexts = {8, 40, 60};  // 60 + 3 steps + 2 exceeds the 64 positions: skipped
  pc.steps = 3;
  pc.prefill_batch = 2;
  pc.prefill_len = 16;
  const Profile p = measure_profile(lm, pc);
  ASSERT_EQ(p.ptl.size(), 4u);
  for (const PtlPoint& pt : p.ptl) {
    EXPECT_GT(pt.step_seconds, 0.0);
    EXPECT_LT(pt.step_seconds, 1.0);
    EXPECT_TRUE(pt.context == 8 || pt.context == 40);
  }
  EXPECT_GT(p.prefill_tokens_per_s, 0.0);
  EXPECT_GT(p.table().step_seconds(2, 20), 0.0);
}

}  // namespace
}  // namespace streamrl::engine
