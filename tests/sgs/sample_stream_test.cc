// The sample sink both pools deliver through: made from a callable with or without the instance
// index, empty by default (and its copies stay empty); the queue behind it is FIFO with a timeout.
#include "streamrl/sgs/sample_stream.h"

#include <gtest/gtest.h>

namespace streamrl::sgs {
namespace {

using std::chrono::milliseconds;

engine::Sample sample(int64_t request_id) {
  engine::Sample s;
  s.request_id = request_id;
  return s;
}

TEST(SampleSink, TakesACallableWithOrWithoutTheInstance) {
  std::vector<std::pair<int, int64_t>> got;
  const SampleSink with_instance = [&](int inst, engine::Sample&& s) {
    got.emplace_back(inst, s.request_id);
  };
  const SampleSink sample_only = [&](engine::Sample&& s) { got.emplace_back(-1, s.request_id); };
  with_instance(3, sample(7));
  sample_only(3, sample(8));
  EXPECT_EQ(got, (std::vector<std::pair<int, int64_t>>{{3, 7}, {-1, 8}}));
  EXPECT_TRUE(with_instance);
  EXPECT_TRUE(sample_only);
}

TEST(SampleSink, EmptyByDefaultAndCopiedAsIs) {
  SampleSink empty;
  const SampleSink copy = empty;  // copied, not wrapped as a callable
  const SampleSink moved = std::move(empty);
  EXPECT_FALSE(copy);
  EXPECT_FALSE(moved);
}

TEST(SampleQueue, SinkPushesInOrderAndPopTimesOut) {
  SampleQueue q;
  const SampleSink sink = q.sink();
  sink(0, sample(1));
  sink(1, sample(2));
  sink(0, sample(3));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.pop(milliseconds(0))->request_id, 1);
  const std::vector<engine::Sample> rest = q.drain();
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].request_id, 2);
  EXPECT_EQ(rest[1].request_id, 3);
  EXPECT_FALSE(q.pop(milliseconds(5)).has_value());
}

}  // namespace
}  // namespace streamrl::sgs
