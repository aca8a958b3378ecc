// The prompt-level train/eval split: disjoint, stable, and about one eval prompt in eight.
#include "streamrl/tasks/split.h"

#include <gtest/gtest.h>

#include <set>

#include "streamrl/core/errors.h"

namespace streamrl::tasks {
namespace {

TEST(Split, AboutOnePromptInEightIsEval) {
  int eval = 0;
  for (int i = 0; i < 80'000; ++i) eval += split_of(std::to_string(i) + "=") == Split::kEval;
  EXPECT_NEAR(eval, 10'000, 400);
  EXPECT_EQ(split_of("17+5+230="), split_of("17+5+230="));
}

TEST(Split, SeedsDifferInEveryArgument) {
  const uint64_t s = problem_seed(1, Split::kTrain, 2, 0);
  EXPECT_EQ(s, problem_seed(1, Split::kTrain, 2, 0));
  EXPECT_NE(s, problem_seed(0, Split::kTrain, 2, 0));
  EXPECT_NE(s, problem_seed(1, Split::kEval, 2, 0));
  EXPECT_NE(s, problem_seed(1, Split::kTrain, 3, 0));
  EXPECT_NE(s, problem_seed(1, Split::kTrain, 2, 1));
}

TEST(Split, TrainAndEvalPromptsNeverOverlap) {
  const Task& task = get_task("sum");
  std::set<std::string> train, eval;
  for (uint64_t i = 0; i < 20'000; ++i) {
    const Problem p = draw_problem(task, 3, Split::kTrain, i);
    ASSERT_EQ(split_of(p.prompt), Split::kTrain);
    train.insert(p.prompt);
  }
  for (uint64_t i = 0; i < 3'000; ++i) {
    const Problem p = draw_problem(task, 3, Split::kEval, i);
    ASSERT_EQ(split_of(p.prompt), Split::kEval);
    eval.insert(p.prompt);
  }
  for (const std::string& prompt : eval) ASSERT_EQ(train.count(prompt), 0u) << prompt;
  // Short sums repeat, so the check above is not vacuous.
  EXPECT_LT(train.size(), 20'000u);
}

TEST(Split, DrawsAreReproducibleFromTheirSeed) {
  const Task& task = get_task("mul");
  const Problem p = draw_problem(task, 9, Split::kEval, 4);
  EXPECT_EQ(task.generate(p.seed).prompt, p.prompt);
  EXPECT_EQ(draw_problem(task, 9, Split::kEval, 4).prompt, p.prompt);
  EXPECT_NE(draw_problem(task, 10, Split::kEval, 4).prompt, p.prompt);
}

TEST(Split, DrawsArePinned) {
  const Problem p = draw_problem(get_task("sum"), 7, Split::kEval, 0);
  EXPECT_EQ(p.prompt, "4+9+7=");
  EXPECT_EQ(p.seed, 11093183901678259915ULL);
}

// A task with one prompt lies wholly in one split and cannot serve the other.
class ConstantTask final : public Task {
 public:
  std::string name() const override { return "constant"; }
  std::string description() const override { return "always 1+1"; }
  Problem generate(uint64_t seed) const override {
    return Problem{"1+1=", "2", "1+1=2;#2", 0, 2, seed};
  }
  double verify(const Problem&, std::string_view) const override { return 0.0; }
};

TEST(Split, TaskWithoutPromptsInASplitIsAnInputError) {
  const ConstantTask task;
  const Split home = split_of("1+1=");
  const Split other = home == Split::kTrain ? Split::kEval : Split::kTrain;
  EXPECT_EQ(draw_problem(task, 0, home, 0).prompt, "1+1=");
  EXPECT_THROW(draw_problem(task, 0, other, 0), InputError);
}

}  // namespace
}  // namespace streamrl::tasks
