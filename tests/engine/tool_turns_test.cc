// The hooks that run tool rollouts inside the engine: with decoding pipelining a call starts as
// its closing tag is sampled, and the turn's end reuses its result instead of calling again.
#include "streamrl/engine/tool_turns.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::engine {
namespace {

// Echoes its "x" argument and counts its calls.
class EchoTool : public tools::Tool {
 public:
  explicit EchoTool(std::atomic<int>* calls) : calls_(calls) {}
  std::string name() const override { return "echo"; }
  nlohmann::json schema() const override { return {{"type", "function"}, {"name", "echo"}}; }
  std::string run(const nlohmann::json& arguments) const override {
    calls_->fetch_add(1);
    return arguments.at("x").get<std::string>();
  }

 private:
  std::atomic<int>* calls_;
};

std::string call_text(const std::string& x) {
  return R"(<tool_call>{"name": "echo", "arguments": {"x": ")" + x + R"("}}</tool_call>)";
}

bool wait_for(const std::atomic<int>& n, int want) {
  for (int i = 0; i < 5000 && n.load() < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return n.load() >= want;
}

struct Fixture {
  std::atomic<int> calls{0};
  std::unique_ptr<tokenizer::Tokenizer> tok = tokenizer::make_tokenizer("char");
  std::shared_ptr<tools::ToolRunner> runner = [this] {
    auto r = std::make_shared<tools::ToolRunner>();
    r->add(std::make_shared<EchoTool>(&calls));
    return r;
  }();

  // Feeds `text` to on_turn_token one token at a time as the engine would, after `before`.
  Sample decode(const ToolTurnHooks& hooks, const std::string& before, const std::string& text) {
    Sample s;
    s.request_id = 7;
    s.output_ids = tok->encode(before);
    for (int32_t id : tok->encode(text)) {
      s.output_ids.push_back(id);
      hooks.on_turn_token(s, tok->encode(before).size());
    }
    return s;
  }
};

TEST(ToolTurns, PipelinedCallStartsWhenItsTagClosesAndIsNotRunAgain) {
  Fixture f;
  const ToolTurnHooks hooks = tool_turns(f.runner, *f.tok, 4, nullptr, /*pipelined=*/true);
  ASSERT_TRUE(hooks.on_turn_token);
  const std::string call = call_text("a");
  Sample s = f.decode(hooks, "", call.substr(0, call.size() - 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(f.calls.load(), 0) << "started before its closing tag";
  s = f.decode(hooks, "", call + " and then a second thought");
  ASSERT_TRUE(wait_for(f.calls, 1)) << "did not start when its closing tag was sampled";
  s.finish_reason = FinishReason::kStop;
  s.turns = 1;
  const TurnWork work = hooks.on_turn(s, 0);
  ASSERT_TRUE(work);
  const std::vector<int32_t> appended = work();
  EXPECT_EQ(f.calls.load(), 1) << "the turn's end called the tool again";

  // The same turn without pipelining appends the same tokens.
  const ToolTurnHooks serial = tool_turns(f.runner, *f.tok, 4, nullptr, /*pipelined=*/false);
  EXPECT_FALSE(serial.on_turn_token);
  EXPECT_EQ(serial.on_turn(s, 0)(), appended);
}

TEST(ToolTurns, CallsNotClosedInTheStreamRunAtTheTurnsEnd) {
  Fixture f;
  const ToolTurnHooks hooks = tool_turns(f.runner, *f.tok, 4, nullptr, /*pipelined=*/true);
  // The second call's tokens arrive without on_turn_token (as if it had not been sampled yet).
  Sample s = f.decode(hooks, "", call_text("a"));
  ASSERT_TRUE(wait_for(f.calls, 1));
  const std::vector<int32_t> second = f.tok->encode(call_text("b"));
  s.output_ids.insert(s.output_ids.end(), second.begin(), second.end());
  s.finish_reason = FinishReason::kStop;
  s.turns = 1;
  const std::string text = f.tok->decode(hooks.on_turn(s, 0)());
  EXPECT_EQ(f.calls.load(), 2);
  EXPECT_LT(text.find('a'), text.find('b')) << text;

  // A later turn of the same rollout starts afresh; a turn cut off ends the rollout even though
  // its call already ran.
  const std::string before = f.tok->decode(s.output_ids) + "<tool_response>a</tool_response>";
  Sample next = f.decode(hooks, before, call_text("c"));
  ASSERT_TRUE(wait_for(f.calls, 3));
  next.finish_reason = FinishReason::kLength;
  next.turns = 2;
  EXPECT_FALSE(hooks.on_turn(next, f.tok->encode(before).size()));
}

// A rollout aborted after one of its calls started leaves nothing behind (the hooks live as long
// as a server or a trainer): a later rollout under the same ids starts its own calls.
TEST(ToolTurns, AbortedRolloutForgetsItsEarlyCalls) {
  Fixture f;
  const ToolTurnHooks hooks = tool_turns(f.runner, *f.tok, 4, nullptr, /*pipelined=*/true);
  ASSERT_TRUE(hooks.on_rollout_end);
  Sample s = f.decode(hooks, "", call_text("a"));
  ASSERT_TRUE(wait_for(f.calls, 1));
  s.finish_reason = FinishReason::kAborted;
  hooks.on_rollout_end(s, 0);
  f.decode(hooks, "", call_text("a"));
  EXPECT_TRUE(wait_for(f.calls, 2)) << "the aborted rollout's early call was kept";
}

}  // namespace
}  // namespace streamrl::engine
