#include "streamrl/core/batching_sim.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::core {
namespace {

// One second per sequence in the batch plus one per 100 tokens of mean context.
const StepFn kStep = [](double batch, double context) { return batch + context / 100; };

TEST(BatchingSim, DecodesToEachCompletionAtTheMeanContextHalfwayThrough) {
  BatchingSim sim(kStep);
  sim.admit(7, 2, 10);
  sim.admit(9, 5, 20);
  EXPECT_EQ(sim.running(), 2);
  BatchingSim::Chunk c = sim.decode_to_next_completion();
  EXPECT_DOUBLE_EQ(c.steps, 2);
  EXPECT_EQ(c.batch, 2);
  EXPECT_DOUBLE_EQ(c.seconds, 2 * (2 + (15 + 1) / 100.0));  // mean context 15, +1 halfway
  EXPECT_EQ(c.finished, std::vector<int>{7});
  EXPECT_EQ(sim.running(), 1);
  c = sim.decode_to_next_completion();  // id 9: 3 tokens left from context 22
  EXPECT_DOUBLE_EQ(c.steps, 3);
  EXPECT_EQ(c.batch, 1);
  EXPECT_DOUBLE_EQ(c.seconds, 3 * (1 + 23.5 / 100));
  EXPECT_EQ(c.finished, std::vector<int>{9});
  EXPECT_EQ(sim.running(), 0);
}

TEST(BatchingSim, SharedContextAddsToTheMeanAndTiesFinishTogether) {
  BatchingSim sim(kStep, 50);
  sim.admit(3, 4, 0);
  sim.admit(1, 4, 10);
  sim.admit(2, 6, 0);
  BatchingSim::Chunk c = sim.decode_to_next_completion();
  EXPECT_DOUBLE_EQ(c.seconds, 4 * (3 + (50 + 10 / 3.0 + 2) / 100));
  EXPECT_EQ(c.finished, (std::vector<int>{3, 1}));  // admission order
  sim.admit(4, 1, 0);                               // admitted between chunks
  c = sim.decode_to_next_completion();
  EXPECT_DOUBLE_EQ(c.steps, 1);
  EXPECT_DOUBLE_EQ(c.seconds, 2 + (50 + 2 + 0.5) / 100);  // contexts 4 and 0
  EXPECT_EQ(c.finished, std::vector<int>{4});
}

TEST(BatchingSim, RejectsEmptyWork) {
  BatchingSim sim(kStep);
  EXPECT_THROW(sim.decode_to_next_completion(), InputError);
  EXPECT_THROW(sim.admit(0, 0, 10), InputError);
}

}  // namespace
}  // namespace streamrl::core
