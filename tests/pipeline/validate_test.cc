#include "streamrl/pipeline/validate.h"

#include <gtest/gtest.h>

namespace streamrl::pipeline {
namespace {

Op fwd(int mb, int chunk = 0) { return {OpKind::kForward, mb, chunk}; }
Op bwd(int mb, int chunk = 0) { return {OpKind::kBackward, mb, chunk}; }

Schedule two_stages(std::vector<Op> stage0, std::vector<Op> stage1, int micro_batches = 2) {
  return Schedule{2, 1, micro_batches, {std::move(stage0), std::move(stage1)}, "hand-made"};
}

TEST(Validate, AcceptsAHandWrittenSchedule) {
  EXPECT_EQ(
      validate(two_stages({fwd(0), fwd(1), bwd(0), bwd(1)}, {fwd(0), bwd(0), fwd(1), bwd(1)})), "");
}

TEST(Validate, RejectsBackwardBeforeItsForward) {
  const std::string e =
      validate(two_stages({fwd(0), fwd(1), bwd(0), bwd(1)}, {bwd(0), fwd(0), fwd(1), bwd(1)}));
  EXPECT_EQ(e,
            "invalid hand-made schedule: stage 1 op 0 (B mb 0 chunk 0) runs before F mb 0 chunk 0 "
            "(op 1) that it depends on");
}

TEST(Validate, RejectsAMissingOrRepeatedOp) {
  EXPECT_EQ(validate(two_stages({fwd(0), fwd(1), bwd(0), bwd(1)}, {fwd(0), bwd(0), fwd(1)})),
            "invalid hand-made schedule: stage 1 never runs B mb 1 chunk 0");
  EXPECT_EQ(validate(two_stages({fwd(0), fwd(1), bwd(0), bwd(1)},
                                {fwd(0), bwd(0), fwd(0), fwd(1), bwd(1)})),
            "invalid hand-made schedule: stage 1 runs F mb 0 chunk 0 twice (ops 0 and 2)");
}

TEST(Validate, RejectsACircularWait) {
  // Stage 0 wants micro-batch 0's gradient before sending micro-batch 1's activation; stage 1
  // wants that activation before it runs micro-batch 0's backward.
  const std::string e =
      validate(two_stages({fwd(0), bwd(0), fwd(1), bwd(1)}, {fwd(1), fwd(0), bwd(0), bwd(1)}));
  EXPECT_EQ(e,
            "invalid hand-made schedule: deadlock: stage 0 op 1 (B mb 0 chunk 0) waits for stage 1 "
            "op 2 (B mb 0 chunk 0); stage 1 op 0 (F mb 1 chunk 0) waits for stage 0 op 2 (F mb 1 "
            "chunk 0)");
}

TEST(Validate, RejectsChunksOutOfOrderOnOneStage) {
  // One stage with two chunks: chunk 1's forward needs chunk 0's output.
  Schedule s{1, 2, 1, {{fwd(0, 1), fwd(0, 0), bwd(0, 1), bwd(0, 0)}}, ""};
  EXPECT_EQ(validate(s),
            "invalid schedule: stage 0 op 0 (F mb 0 chunk 1) runs before F mb 0 chunk 0 (op 1) "
            "that it depends on");
  s.ops[0] = {fwd(0, 0), fwd(0, 1), bwd(0, 0), bwd(0, 1)};
  EXPECT_EQ(validate(s),
            "invalid schedule: stage 0 op 2 (B mb 0 chunk 0) runs before B mb 0 chunk 1 (op 3) "
            "that it depends on");
}

TEST(Validate, RejectsBadShapes) {
  EXPECT_NE(validate(Schedule{2, 1, 1, {{fwd(0), bwd(0)}}, ""}).find("op lists for 1 stages"),
            std::string::npos);
  EXPECT_NE(validate(two_stages({fwd(0), bwd(0, 1)}, {fwd(0), bwd(0)}, 1)).find("out of range"),
            std::string::npos);
  EXPECT_NE(validate(Schedule{}).find("micro-batches >= 1"), std::string::npos);
}

TEST(Validate, InOrderLinksIsOptional) {
  // Valid with tagged messages, but stage 1 receives micro-batch 1's activation first.
  const Schedule s = two_stages({fwd(0), fwd(1), bwd(1), bwd(0)}, {fwd(1), bwd(1), fwd(0), bwd(0)});
  EXPECT_EQ(validate(s), "");
  EXPECT_EQ(validate(s, {true}),
            "invalid hand-made schedule: link 0->1: message 0 is sent for F mb 0 chunk 0 but "
            "received for F mb 1 chunk 0");
}

}  // namespace
}  // namespace streamrl::pipeline
