// The formats and length distributions of the built-in tasks: exact demonstrations for hand-picked
// problems, step-by-step re-checks of generated ones, and the heavy tails StreamRL's skewness
// handling needs.
#include <gtest/gtest.h>

#include <charconv>
#include <map>
#include <string>
#include <vector>

#include "streamrl/tasks/builtin/chain_task.h"
#include "streamrl/tasks/builtin/collatz_task.h"
#include "streamrl/tasks/builtin/mul_task.h"
#include "streamrl/tasks/builtin/sum_task.h"
#include "streamrl/tasks/length_stats.h"

namespace streamrl::tasks {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = s.find(sep, begin)) != std::string::npos; begin = end + 1) {
    parts.push_back(s.substr(begin, end - begin));
  }
  parts.push_back(s.substr(begin));
  return parts;
}

int64_t to_int(const std::string& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  EXPECT_TRUE(ec == std::errc() && end == s.data() + s.size()) << "not an integer: '" << s << "'";
  return v;
}

// The steps of a demonstration "step;step;...;#answer", without the answer.
std::vector<std::string> steps_of(const Problem& p) {
  std::vector<std::string> steps = split(p.demonstration, ';');
  EXPECT_EQ(steps.back(), "#" + p.reference);
  steps.pop_back();
  return steps;
}

struct LengthProfile {
  LengthSummary demonstration;
  LengthSummary total;
  double spearman_size_length = 0.0;
  std::vector<int> difficulty_counts = std::vector<int>(kMaxDifficulty + 1, 0);
};

LengthProfile profile(const Task& task, int n) {
  std::vector<double> demo, total, size;
  LengthProfile prof;
  for (int i = 0; i < n; ++i) {
    const Problem p = task.generate(1'000'000 + i);
    demo.push_back(p.demonstration.size());
    total.push_back(p.prompt.size() + p.demonstration.size());
    size.push_back(p.visible_size);
    ++prof.difficulty_counts[p.difficulty];
  }
  prof.demonstration = summarize(demo);
  prof.total = summarize(total);
  prof.spearman_size_length = spearman(size, demo);
  return prof;
}

TEST(SumTask, RunningTotalFormat) {
  const Problem p = make_sum_problem(std::vector<int64_t>{17, 5, 230});
  EXPECT_EQ(p.prompt, "17+5+230=");
  EXPECT_EQ(p.demonstration, "17+5=22;22+230=252;#252");
  EXPECT_EQ(p.reference, "252");
  EXPECT_EQ(p.visible_size, 3);
  EXPECT_EQ(p.difficulty, 1);
  EXPECT_EQ(make_sum_problem(std::vector<int64_t>{3, 0}).demonstration, "3+0=3;#3");
  EXPECT_EQ(make_sum_problem(std::vector<int64_t>{4, 7, 9}).demonstration, "4+7=11;11+9=20;#20");
}

TEST(SumTask, EveryGeneratedStepAddsTheNextOperandToThePreviousTotal) {
  const SumTask task;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const Problem p = task.generate(seed);
    std::vector<std::string> operands = split(p.prompt.substr(0, p.prompt.size() - 1), '+');
    ASSERT_GE(operands.size(), 2u);
    ASSERT_LE(operands.size(), static_cast<size_t>(kSumMaxOperands));
    ASSERT_EQ(p.visible_size, static_cast<int>(operands.size()));
    for (const std::string& x : operands) ASSERT_EQ(x.size(), 1u) << p.prompt;
    const std::vector<std::string> steps = steps_of(p);
    ASSERT_EQ(steps.size(), operands.size() - 1);
    std::string total = operands[0];
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string expected_lhs = total + "+" + operands[i + 1] + "=";
      ASSERT_EQ(steps[i].substr(0, expected_lhs.size()), expected_lhs) << p.prompt;
      total = steps[i].substr(expected_lhs.size());
      ASSERT_EQ(to_int(total),
                to_int(steps[i].substr(0, steps[i].find('+'))) + to_int(operands[i + 1]));
    }
    ASSERT_EQ(total, p.reference);
  }
}

TEST(SumTask, LengthsAreHeavyTailedAndMostlyVisible) {
  const LengthProfile prof = profile(SumTask(), 10'000);
  const LengthSummary& d = prof.demonstration;
  EXPECT_GE(d.p90 / d.p50, 2.5) << d.p50 << " " << d.p90;
  EXPECT_GE(d.p99 / d.p50, 5.0) << d.p50 << " " << d.p99;
  // Prompt plus demonstration: short in the body, a few hundred characters in the tail.
  EXPECT_GE(prof.total.p50, 20);
  EXPECT_LE(prof.total.p50, 60);
  EXPECT_GE(prof.total.p99, 200);
  EXPECT_LE(prof.total.p99, 450);
  EXPECT_LE(prof.total.max, 600);
  EXPECT_GT(prof.spearman_size_length, 0.8);
  for (int bucket = 0; bucket <= kMaxDifficulty; ++bucket) {
    EXPECT_GT(prof.difficulty_counts[bucket], 100) << bucket;
  }
  // Easy problems dominate, so a tiny model finds something to learn and RL something to improve.
  EXPECT_GT(prof.difficulty_counts[0], prof.difficulty_counts[kMaxDifficulty]);
}

TEST(SumTask, SameOperandCountStillVariesInLength) {
  // Carries widen the running total at value-dependent steps, so the operand count alone does not
  // fix the length.
  const SumTask task;
  size_t shortest = 1000, longest = 0;
  for (uint64_t seed = 0; seed < 5000; ++seed) {
    const Problem p = task.generate(seed);
    if (p.visible_size != 10) continue;
    shortest = std::min(shortest, p.demonstration.size());
    longest = std::max(longest, p.demonstration.size());
  }
  EXPECT_GE(longest, shortest + 8);
}

TEST(ChainTask, WalkFormat) {
  const Problem p = make_chain_problem({{1, 60}, {8, 77}, {77, 1}}, 8);
  EXPECT_EQ(p.prompt, "1>60,8>77,77>1|8=");
  EXPECT_EQ(p.demonstration, "8>77;77>1;1>60;#60");
  EXPECT_EQ(p.reference, "60");
  EXPECT_EQ(p.visible_size, 3);
  EXPECT_EQ(p.difficulty, 1);  // 3 steps
  EXPECT_EQ(make_chain_problem({{5, 50}, {15, 5}}, 5).demonstration, "5>50;#50");
}

TEST(ChainTask, EveryGeneratedStepFollowsThePromptsEdges) {
  const ChainTask task;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const Problem p = task.generate(seed);
    const size_t bar = p.prompt.find('|');
    std::map<std::string, std::string> next;
    for (const std::string& edge : split(p.prompt.substr(0, bar), ',')) {
      const size_t arrow = edge.find('>');
      ASSERT_TRUE(next.emplace(edge.substr(0, arrow), edge.substr(arrow + 1)).second)
          << "two edges leave one node: " << p.prompt;
    }
    ASSERT_EQ(p.visible_size, static_cast<int>(next.size()));
    ASSERT_LE(next.size(), static_cast<size_t>(kChainMaxEdges));
    std::string node = p.prompt.substr(bar + 1, p.prompt.size() - bar - 2);
    for (const std::string& step : steps_of(p)) {
      ASSERT_EQ(step, node + ">" + next.at(node)) << p.prompt;
      node = next.at(node);
    }
    ASSERT_EQ(next.count(node), 0u) << "the walk must stop at a dead end: " << p.prompt;
    ASSERT_EQ(node, p.reference);
  }
}

TEST(ChainTask, LengthsAreHeavyTailedAndPartlyVisible) {
  const LengthProfile prof = profile(ChainTask(), 10'000);
  EXPECT_GE(prof.demonstration.p90 / prof.demonstration.p50, 2.5);
  EXPECT_GE(prof.demonstration.p99 / prof.demonstration.p50, 5.0);
  // The edge count bounds the walk without fixing it.
  EXPECT_GT(prof.spearman_size_length, 0.5);
  EXPECT_LT(prof.spearman_size_length, 0.9);
}

TEST(MulTask, PartialProductFormat) {
  Problem p = make_mul_problem(47, 306);
  EXPECT_EQ(p.prompt, "47*306=");
  EXPECT_EQ(p.demonstration, "47*6=282;47*300=14100;282+14100=14382;#14382");
  EXPECT_EQ(p.reference, "14382");
  EXPECT_EQ(p.visible_size, 3);
  EXPECT_EQ(p.difficulty, 1);  // 3 steps
  EXPECT_EQ(make_mul_problem(47, 36).demonstration, "47*6=282;47*30=1410;282+1410=1692;#1692");
  EXPECT_EQ(make_mul_problem(12, 100).demonstration, "12*100=1200;#1200");
  EXPECT_EQ(make_mul_problem(12, 100).difficulty, 0);
  EXPECT_EQ(make_mul_problem(9, 7).demonstration, "9*7=63;#63");
}

TEST(MulTask, EveryGeneratedStepIsAPartialProductOrARunningSum) {
  const MulTask task;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const Problem p = task.generate(seed);
    const size_t star = p.prompt.find('*');
    const int64_t a = to_int(p.prompt.substr(0, star));
    const int64_t b = to_int(p.prompt.substr(star + 1, p.prompt.size() - star - 2));
    ASSERT_GE(a, 2);
    ASSERT_GE(b, 2);
    ASSERT_EQ(p.reference, std::to_string(a * b));
    for (const std::string& step : steps_of(p)) {
      const size_t eq = step.find('=');
      const int64_t result = to_int(step.substr(eq + 1));
      const size_t op = step.find_first_of("*+");
      const int64_t x = to_int(step.substr(0, op)), y = to_int(step.substr(op + 1, eq - op - 1));
      ASSERT_EQ(result, step[op] == '*' ? x * y : x + y) << step;
    }
  }
}

TEST(MulTask, LengthsAreHeavyTailed) {
  const LengthProfile prof = profile(MulTask(), 10'000);
  EXPECT_GE(prof.demonstration.p90 / prof.demonstration.p50, 2.5);
  EXPECT_GE(prof.demonstration.p99 / prof.demonstration.p50, 5.0);
  EXPECT_GT(prof.spearman_size_length, 0.5);
}

TEST(CollatzTask, TrajectoryFormat) {
  const Problem p = make_collatz_problem(7);
  EXPECT_EQ(p.prompt, "collatz(7)=");
  EXPECT_EQ(p.demonstration, "22,11,34,17,52,26,13,40,20,10,5;#5");
  EXPECT_EQ(p.reference, "5");
  EXPECT_EQ(p.difficulty, 3);  // 11 steps
  EXPECT_EQ(make_collatz_problem(5).demonstration, "16,8,4;#4");
  EXPECT_EQ(make_collatz_problem(5).difficulty, 1);
  EXPECT_EQ(make_collatz_problem(10).demonstration, "5;#5");
}

TEST(CollatzTask, EveryGeneratedValueFollowsTheMap) {
  const CollatzTask task;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const Problem p = task.generate(seed);
    const int64_t n = to_int(p.prompt.substr(8, p.prompt.size() - 10));
    ASSERT_EQ(n % 2, 1);
    ASSERT_GE(n, 11);
    ASSERT_LE(n, 9999);
    ASSERT_LE(p.demonstration.size(), kCollatzMaxDemonstrationChars);
    const std::vector<std::string> steps = steps_of(p);
    ASSERT_EQ(steps.size(), 1u);
    int64_t x = n;
    const std::vector<std::string> values = split(steps[0], ',');
    for (size_t i = 0; i < values.size(); ++i) {
      x = x % 2 == 0 ? x / 2 : 3 * x + 1;
      ASSERT_EQ(to_int(values[i]), x);
      ASSERT_EQ(x < n, i + 1 == values.size()) << "must stop at the first value below the start";
    }
  }
}

TEST(CollatzTask, LengthsAreHeavyTailedAndMostlyHidden) {
  const LengthProfile prof = profile(CollatzTask(), 10'000);
  EXPECT_GE(prof.demonstration.p90 / prof.demonstration.p50, 2.5);
  EXPECT_GE(prof.demonstration.p99 / prof.demonstration.p50, 5.0);
  // The start's width says little about the trajectory: far weaker than the sum task's.
  EXPECT_LT(prof.spearman_size_length, 0.5);
}

}  // namespace
}  // namespace streamrl::tasks
