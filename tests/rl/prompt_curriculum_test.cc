// The online difficulty curriculum: pass rates over a window, weights that favour a pass rate
// near 1/2, deterministic draws that follow the weights, the difficulty cap, and state round trip.
#include <gtest/gtest.h>

#include <map>

#include "streamrl/rl/prompt_curriculum.h"
#include "streamrl/tasks/split.h"

namespace streamrl::rl {
namespace {

TEST(PassRateCurriculum, WeightsFavourHalfSolvedDifficulties) {
  PassRateCurriculum c({.enabled = true, .window = 4, .floor = 0.05});
  for (int i = 0; i < 10; ++i) c.observe(0, 1.0);    // always solved
  for (int i = 0; i < 10; ++i) c.observe(1, i % 2);  // half
  for (int i = 0; i < 10; ++i) c.observe(3, 0.0);    // never
  c.observe(2, 1.0);
  const auto w = c.weights();
  EXPECT_DOUBLE_EQ(w.at(0), 0.05);
  EXPECT_DOUBLE_EQ(w.at(1), 1.0);
  EXPECT_DOUBLE_EQ(w.at(2), 0.05);
  EXPECT_DOUBLE_EQ(w.at(3), 0.05);
  // The window keeps the last 4 outcomes only.
  for (int i = 0; i < 3; ++i) c.observe(0, 0.0);
  EXPECT_DOUBLE_EQ(c.pass_rates().at(0), 0.25);
  EXPECT_DOUBLE_EQ(c.weights().at(0), 0.75);

  // A power above 1 sharpens the preference: p = 0.25 gives 0.75^2.
  PassRateCurriculum sharp({.enabled = true, .window = 4, .floor = 0.05, .power = 2});
  sharp.restore(c.state());
  EXPECT_DOUBLE_EQ(sharp.weights().at(0), 0.5625);
  EXPECT_DOUBLE_EQ(sharp.weights().at(1), 1.0);  // p = 1/2
  EXPECT_DOUBLE_EQ(sharp.weights().at(3), 0.05);

  PassRateCurriculum restored({.enabled = true, .window = 4, .floor = 0.05});
  restored.restore(c.state());
  EXPECT_EQ(restored.weights(), c.weights());
}

TEST(DrawTrainingProblem, PlainDrawsAreTheTaskTrainSplit) {
  const tasks::Task& task = tasks::get_task("sum");
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(draw_training_problem(task, 7, i, -1, nullptr).prompt,
              tasks::draw_problem(task, 7, tasks::Split::kTrain, i).prompt);
  }
}

TEST(DrawTrainingProblem, FollowsTheWeightsAndTheCap) {
  const tasks::Task& task = tasks::get_task("sum");
  std::map<int, int> plain, weighted;
  const std::map<int, double> weights = {{0, 0.05}, {1, 1.0}, {2, 0.05}, {3, 0.05}, {4, 0.05}};
  for (uint64_t i = 0; i < 400; ++i) {
    plain[draw_training_problem(task, 1, i, -1, nullptr).difficulty] += 1;
    const tasks::Problem p = draw_training_problem(task, 1, i, -1, &weights);
    weighted[p.difficulty] += 1;
    EXPECT_EQ(p.prompt, draw_training_problem(task, 1, i, -1, &weights).prompt);  // deterministic
    EXPECT_LE(draw_training_problem(task, 1, i, 1, &weights).difficulty, 1);
  }
  EXPECT_LT(plain[1], 200);  // about a third of the sum task is difficulty 1
  EXPECT_GT(weighted[1], 320);
}

}  // namespace
}  // namespace streamrl::rl
