// ToolRunner: a tool that hangs, throws or floods output is cut off with a message to the model,
// never a crash or a hung rollout.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "streamrl/core/errors.h"
#include "streamrl/tools/calc_tool.h"
#include "streamrl/tools/lookup_tool.h"
#include "streamrl/tools/tool.h"

namespace streamrl::tools {
namespace {

// A test tool: `behaviour` is "hang" (sleeps `seconds`), "throw", "flood" or "echo".
class TestTool : public Tool {
 public:
  TestTool(std::string name, std::string behaviour, double seconds = 0)
      : name_(std::move(name)), behaviour_(std::move(behaviour)), seconds_(seconds) {}
  std::string name() const override { return name_; }
  nlohmann::json schema() const override { return {{"type", "function"}, {"name", name_}}; }
  std::string run(const nlohmann::json& arguments) const override {
    if (behaviour_ == "hang") {
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
      return "late";
    }
    if (behaviour_ == "throw") throw std::runtime_error("disk on fire");
    if (behaviour_ == "flood") return std::string(100000, 'x');
    return arguments.dump();
  }

 private:
  std::string name_, behaviour_;
  double seconds_;
};

ToolCall call(std::string name, nlohmann::json args = nlohmann::json::object()) {
  ToolCall c;
  c.name = std::move(name);
  c.arguments = std::move(args);
  return c;
}

// Waits (up to 2 s) until `expected` calls are inside it at once: "together" proves they ran
// concurrently; calls run one after another each answer "alone".
class RendezvousTool : public Tool {
 public:
  explicit RendezvousTool(int expected) : expected_(expected) {}
  std::string name() const override { return "meet"; }
  nlohmann::json schema() const override { return {{"type", "function"}, {"name", "meet"}}; }
  std::string run(const nlohmann::json&) const override {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    cv_.notify_all();
    const bool met =
        cv_.wait_for(lock, std::chrono::seconds(2), [&] { return inside_ >= expected_; });
    return met ? "together" : "alone";
  }

 private:
  int expected_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int inside_ = 0;
};

TEST(ToolRunner, CallsOfOneTurnRunConcurrently) {
  ToolRunner runner;
  runner.add(std::make_shared<RendezvousTool>(3));
  runner.add(std::make_shared<TestTool>("echo", "echo"));
  const std::vector<ToolResult> results =
      runner.call_all({call("meet"), call("echo", {{"x", 1}}), call("meet"), call("meet")});
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].text, "together");
  EXPECT_EQ(results[1].text, "{\"x\":1}");  // results keep the calls' order
  EXPECT_EQ(results[2].text, "together");
  EXPECT_EQ(results[3].text, "together");
}

TEST(ToolRunner, HangingToolTimesOutWithAMessage) {
  ToolLimits limits;
  limits.timeout_s = 0.2;
  ToolRunner runner(limits);
  runner.add(std::make_shared<TestTool>("slow", "hang", 1.0));
  const auto t0 = std::chrono::steady_clock::now();
  ToolResult r = runner.call(call("slow"));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, ToolStatus::kTimeout);
  EXPECT_EQ(r.text, "error: tool 'slow' timed out after 0.2 s");
  EXPECT_LT(waited, 0.9);  // returned at the timeout, not when the tool finished
  EXPECT_EQ(runner.abandoned(), 1);
  // The abandoned call finishes later and is counted off.
  for (int i = 0; i < 100 && runner.abandoned() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(runner.abandoned(), 0);
}

TEST(ToolRunner, TooManyHungCallsAreRefused) {
  ToolLimits limits;
  limits.timeout_s = 0.05;
  limits.max_abandoned = 2;
  ToolRunner runner(limits);
  runner.add(std::make_shared<TestTool>("slow", "hang", 0.6));
  EXPECT_EQ(runner.call(call("slow")).status, ToolStatus::kTimeout);
  EXPECT_EQ(runner.call(call("slow")).status, ToolStatus::kTimeout);
  ToolResult r = runner.call(call("slow"));
  EXPECT_EQ(r.status, ToolStatus::kError);
  EXPECT_NE(r.text.find("2 earlier calls are still hung"), std::string::npos) << r.text;
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
}

TEST(ToolRunner, ThrowingToolBecomesAnErrorText) {
  ToolRunner runner;
  runner.add(std::make_shared<TestTool>("bad", "throw"));
  ToolResult r = runner.call(call("bad"));
  EXPECT_EQ(r.status, ToolStatus::kError);
  EXPECT_EQ(r.text, "error: disk on fire");
}

TEST(ToolRunner, FloodIsCutToTheLimit) {
  ToolLimits limits;
  limits.max_output_chars = 100;
  ToolRunner runner(limits);
  runner.add(std::make_shared<TestTool>("loud", "flood"));
  ToolResult r = runner.call(call("loud"));
  EXPECT_EQ(r.status, ToolStatus::kOk);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.text, std::string(100, 'x') + "... [output cut: 99900 more characters]");
}

TEST(ToolRunner, UnknownToolsAndMalformedCallsAreAnswered) {
  ToolRunner runner;
  runner.add(std::make_shared<CalcTool>());
  runner.add(std::make_shared<LookupTool>(std::map<std::string, std::string>{{"g", "9.81"}}));
  EXPECT_EQ(runner.call(call("python")).text,
            "error: unknown tool 'python' (available: calc, lookup)");
  ToolCall broken;
  broken.error = "malformed tool call: not JSON";
  EXPECT_EQ(runner.call(broken).text, "error: malformed tool call: not JSON");
  EXPECT_EQ(runner.call(call("calc", {{"expr", "1"}})).text,
            "error: calc needs {\"expression\": string}");
  EXPECT_EQ(runner.call(call("lookup", {{"key", "g"}})).text, "9.81");
  EXPECT_EQ(runner.call(call("lookup", {{"key", "h"}})).text, "error: no key 'h'");
  EXPECT_THROW(runner.add(std::make_shared<CalcTool>()), InputError);
  EXPECT_EQ(runner.schemas().size(), 2u);
  EXPECT_EQ(runner.schemas()[0]["function"]["name"], "calc");
}

TEST(ToolRunner, BadLimitsAreInputErrors) {
  ToolLimits limits;
  limits.timeout_s = 0;
  EXPECT_THROW(ToolRunner{limits}, InputError);
}

}  // namespace
}  // namespace streamrl::tools
