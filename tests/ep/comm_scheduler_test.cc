#include "streamrl/ep/comm_scheduler.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::ep {
namespace {

TEST(Partition, EqualChunksCoverTheTensorOnce) {
  const std::vector<MicroOp> ops = partition(OpKind::kAllReduce, 7, 100, 30);
  ASSERT_EQ(ops.size(), 4u);
  int64_t covered = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i].tensor, 7);
    EXPECT_EQ(ops[i].chunk, static_cast<int>(i));
    EXPECT_EQ(ops[i].offset, covered);
    covered += ops[i].bytes;
  }
  EXPECT_EQ(covered, 100);
  EXPECT_EQ(ops.back().bytes, 10);
  EXPECT_EQ(partition(OpKind::kAllReduce, 0, 100, 0).size(), 1u);  // unpartitioned
  const std::vector<MicroOp> rows = partition(OpKind::kAllToAll, 1, 10, 4, 8);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].offset, 32);
  EXPECT_EQ(rows[2].bytes, 16);
  EXPECT_THROW(partition(OpKind::kAllToAll, 1, 10, 4, 0), InputError);
}

TEST(CommScheduler, AllToAllGoesBeforeTheNextAllReduceChunk) {
  CommScheduler s({Policy::kPartitioned, 10, 4});
  EXPECT_EQ(s.submit_all_reduce(0, 35), 4);
  std::vector<MicroOp> l = s.launch();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].kind, OpKind::kAllReduce);
  EXPECT_EQ(s.submit_all_to_all(1, 8, 2), 2);
  // The running all-reduce chunk cannot be pre-empted, but the all-to-all starts beside it ...
  l = s.launch();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].kind, OpKind::kAllToAll);
  s.completed({OpKind::kAllReduce, 0, 0, 0, 10});
  // ... and no further all-reduce chunk starts while an all-to-all chunk waits or runs.
  EXPECT_TRUE(s.launch().empty());
  s.completed({OpKind::kAllToAll, 1, 0, 0, 8});
  l = s.launch();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].kind, OpKind::kAllToAll);
  EXPECT_EQ(l[0].chunk, 1);
  s.completed(l[0]);
  l = s.launch();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].kind, OpKind::kAllReduce);
  EXPECT_EQ(l[0].chunk, 1);
}

TEST(CommScheduler, AllReduceIsHeldWhileACombineRuns) {
  CommScheduler s({Policy::kPartitioned, 10, 4});
  s.submit_all_reduce(0, 20);
  s.set_combine_running(true);
  EXPECT_TRUE(s.launch().empty());
  s.set_combine_running(false);
  EXPECT_EQ(s.launch().size(), 1u);
}

TEST(CommScheduler, BaselineLaunchesWholeOpsAsReady) {
  CommScheduler s({Policy::kFairShare, 10, 4});
  EXPECT_EQ(s.submit_all_reduce(0, 35), 1);
  EXPECT_EQ(s.submit_all_to_all(1, 8, 2), 1);
  s.set_combine_running(true);
  EXPECT_EQ(s.launch().size(), 2u);  // both at once: they share the link
  EXPECT_FALSE(s.idle());
  s.completed({OpKind::kAllReduce, 0, 0, 0, 35});
  s.completed({OpKind::kAllToAll, 1, 0, 0, 16});
  EXPECT_TRUE(s.idle());
}

TEST(CommScheduler, PriorityAloneDoesNotPartition) {
  CommScheduler s({Policy::kPriority, 10, 4});
  EXPECT_EQ(s.submit_all_reduce(0, 35), 1);
  EXPECT_EQ(s.submit_all_to_all(1, 8, 2), 1);
  const std::vector<MicroOp> l = s.launch();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].kind, OpKind::kAllToAll);
  EXPECT_EQ(parse_policy("lina"), Policy::kPartitioned);
  EXPECT_EQ(policy_name(Policy::kFairShare), "fair_share");
  EXPECT_THROW(parse_policy("fifo"), InputError);
}

}  // namespace
}  // namespace streamrl::ep
