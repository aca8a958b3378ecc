// Properties every built-in task must have: registry, determinism, self-verifying
// demonstrations, printable text, bounded lengths.
#include "streamrl/tasks/task.h"

#include <gtest/gtest.h>

#include <set>

#include "streamrl/core/errors.h"
#include "streamrl/tasks/answer.h"

namespace streamrl::tasks {
namespace {

TEST(TaskRegistry, ListsTheBuiltinsDefaultFirst) {
  const std::vector<std::string> names = task_names();
  EXPECT_EQ(names,
            (std::vector<std::string>{"sum", "chain", "mul", "collatz", "calc", "retrieve"}));
  EXPECT_EQ(default_task_name(), "sum");
  for (const std::string& name : names) {
    EXPECT_EQ(get_task(name).name(), name);
    EXPECT_FALSE(get_task(name).description().empty());
  }
}

TEST(TaskRegistry, UnknownNameListsTheKnownOnes) {
  try {
    get_task("summ");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'summ'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("sum, chain, mul, collatz, calc, retrieve"),
              std::string::npos);
  }
}

TEST(TaskRegistry, DifficultyBucketsArePowersOfTwo) {
  const std::vector<std::pair<int, int>> cases = {
      {0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {7, 2}, {8, 3}, {15, 3}, {16, 4}, {29, 4}, {1000, 4}};
  for (auto [steps, bucket] : cases) EXPECT_EQ(difficulty_from_steps(steps), bucket) << steps;
}

TEST(TaskRegistry, GenerationIsPinned) {
  // Fixed outputs: a change here silently changes every run's data and breaks comparisons with
  // earlier runs, so it must be deliberate.
  EXPECT_EQ(get_task("sum").generate(42).prompt, "1+2+3+0+8=");
  EXPECT_EQ(get_task("sum").generate(42).demonstration, "1+2=3;3+3=6;6+0=6;6+8=14;#14");
  EXPECT_EQ(get_task("mul").generate(0).prompt, "488*9=");
  EXPECT_EQ(get_task("collatz").generate(42).prompt, "collatz(2439)=");
  EXPECT_EQ(get_task("calc").generate(42).prompt, "35*29+405*28+56*69+19*96=");
  EXPECT_EQ(get_task("retrieve").generate(42).prompt.substr(0, 14), "ehi=52;awf=23;");
  EXPECT_EQ(get_task("retrieve").generate(42).reference, "88");
}

class EveryTask : public testing::TestWithParam<std::string> {
 protected:
  const Task& task() const { return get_task(GetParam()); }
};

TEST_P(EveryTask, SameSeedSameProblem) {
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, 0xffffffffffffffffULL}) {
    const Problem a = task().generate(seed);
    const Problem b = task().generate(seed);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.reference, b.reference);
    EXPECT_EQ(a.demonstration, b.demonstration);
    EXPECT_EQ(a.difficulty, b.difficulty);
    EXPECT_EQ(a.visible_size, b.visible_size);
    EXPECT_EQ(a.seed, seed);
  }
}

TEST_P(EveryTask, DifferentSeedsGiveDifferentProblems) {
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 200; ++seed) prompts.insert(task().generate(seed).prompt);
  EXPECT_GE(prompts.size(), 150u);  // short prompts ("3+4=") may repeat
}

TEST_P(EveryTask, DemonstrationsEarnFullReward) {
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    const Problem p = task().generate(seed);
    ASSERT_EQ(task().verify(p, p.demonstration), 1.0) << p.prompt << p.demonstration;
    ASSERT_EQ(find_marked_answer(p.demonstration), p.reference) << p.prompt;
    // The marker appears once, at the end: the scratchpad never looks like an answer.
    ASSERT_EQ(p.demonstration.find(kAnswerMarker), p.demonstration.rfind(kAnswerMarker));
    ASSERT_EQ(p.demonstration.substr(p.demonstration.find(kAnswerMarker) + 1), p.reference);
  }
}

TEST_P(EveryTask, WrongOrMalformedCompletionsEarnNothing) {
  const Problem p = task().generate(5);
  const std::string wrong = p.reference + "1";
  EXPECT_EQ(task().verify(p, ""), 0.0);
  EXPECT_EQ(task().verify(p, p.reference), 0.0);  // no marker
  EXPECT_EQ(task().verify(p, "#" + wrong), 0.0);
  EXPECT_EQ(task().verify(p, "#" + wrong + "\n#" + p.reference), 0.0);
  EXPECT_EQ(task().verify(p, " \n #  " + p.reference + " \n\nsome trailing text"), 1.0);
}

TEST_P(EveryTask, TextIsPrintableAsciiAndLengthsStayCpuSized) {
  auto printable = [](const std::string& s) {
    for (unsigned char c : s) {
      if (!(c == '\n' || (c >= 32 && c <= 126))) return false;
    }
    return true;
  };
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    const Problem p = task().generate(seed);
    ASSERT_TRUE(printable(p.prompt)) << p.prompt;
    ASSERT_TRUE(printable(p.demonstration)) << p.demonstration;
    ASSERT_TRUE(printable(p.reference)) << p.reference;
    ASSERT_EQ(p.prompt.back(), '=');
    // retrieve is the long-context task; the others fit a tiny model's context.
    ASSERT_LE(p.prompt.size() + p.demonstration.size(), GetParam() == "retrieve" ? 16400u : 600u)
        << p.prompt;
    ASSERT_GE(p.difficulty, 0);
    ASSERT_LE(p.difficulty, kMaxDifficulty);
    ASSERT_GT(p.visible_size, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, EveryTask, testing::ValuesIn(task_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace streamrl::tasks
