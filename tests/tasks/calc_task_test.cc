// The agentic "calc" task: its demonstrations must be what a rollout with the real calc tool
// produces turn for turn (each reply parses as a call, the runner's answer rendered as the rollout
// renders it is exactly the appended text), and the joined demonstration verifies.
#include "streamrl/tasks/builtin/calc_task.h"

#include <gtest/gtest.h>

#include <memory>

#include "streamrl/tasks/task.h"
#include "streamrl/tools/calc_tool.h"
#include "streamrl/tools/tool_call_parser.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::tasks {
namespace {

TEST(CalcTask, DemonstrationTurnsAreWhatTheRealToolAnswers) {
  const Task& task = get_task("calc");
  ASSERT_EQ(task.tools(), std::vector<std::string>{"calc"});
  tools::ToolRunner runner;
  runner.add(std::make_shared<tools::CalcTool>());
  int max_calls = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const Problem p = task.generate(seed);
    ASSERT_GE(p.turns.size(), 2u) << p.prompt;
    std::string joined;
    for (size_t t = 0; t + 1 < p.turns.size(); ++t) {
      const auto calls = tools::parse_tool_calls(p.turns[t].reply);
      ASSERT_EQ(calls.size(), 1u) << p.turns[t].reply;
      ASSERT_TRUE(calls[0].error.empty()) << calls[0].error;
      const tools::ToolResult r = runner.call(calls[0]);
      ASSERT_EQ(r.status, tools::ToolStatus::kOk) << r.text;
      EXPECT_EQ(tools::render_plain_tool_turn({r}), p.turns[t].appended);
      joined += p.turns[t].reply + p.turns[t].appended;
    }
    EXPECT_EQ(p.turns.back().reply, "#" + p.reference);
    EXPECT_TRUE(p.turns.back().appended.empty());
    joined += p.turns.back().reply;
    EXPECT_EQ(joined, p.demonstration);
    EXPECT_EQ(task.verify(p, p.demonstration), 1.0);
    EXPECT_EQ(task.verify(p, p.turns.front().reply), 0.0);  // a call alone is no answer
    EXPECT_EQ(p.difficulty, difficulty_from_steps(static_cast<int>(p.turns.size()) - 1));
    max_calls = std::max(max_calls, static_cast<int>(p.turns.size()) - 1);
  }
  EXPECT_GE(max_calls, 3);  // long-tailed in turns
}

TEST(CalcTask, CallsCarryTheValueReadBack) {
  const Problem p = make_calc_problem({22, 698, 83, 81}, {61, 4, 6, 7});
  EXPECT_EQ(p.prompt, "22*61+698*4+83*6+81*7=");
  ASSERT_EQ(p.turns.size(), 3u);
  EXPECT_EQ(
      p.turns[0].reply,
      R"(<tool_call>{"name":"calc","arguments":{"expression":"22*61+698*4+83*6"}}</tool_call>)");
  EXPECT_EQ(p.turns[0].appended, "<tool_response>4632</tool_response>");
  EXPECT_EQ(p.turns[1].reply,
            R"(<tool_call>{"name":"calc","arguments":{"expression":"4632+81*7"}}</tool_call>)");
  EXPECT_EQ(p.turns[1].appended, "<tool_response>5199</tool_response>");
  EXPECT_EQ(p.turns[2].reply, "#5199");
  EXPECT_EQ(p.reference, "5199");
}

}  // namespace
}  // namespace streamrl::tasks
