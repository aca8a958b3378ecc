// Tools a policy calls during a multi-turn rollout (Hermes/Qwen <tool_call> format). A tool's
// failure is never the rollout's: ToolRunner turns an unknown tool, bad arguments, an exception,
// a hang past the timeout or a flood of output into a short text the model reads as the result.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace streamrl::tools {

// One call the model wrote. `error` is set (and name/arguments may be empty) when the call's text
// was not a well-formed call; the runner answers it with that error.
struct ToolCall {
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
  std::string error;
};

enum class ToolStatus { kOk, kError, kTimeout };

struct ToolResult {
  ToolStatus status = ToolStatus::kOk;
  std::string text;        // what the model reads: the output, or "error: ..."
  bool truncated = false;  // the output was cut to ToolLimits::max_output_chars
  double seconds = 0;
};

// A tool: a name, a JSON schema of its arguments for the chat template's `tools` variable, and a
// function from arguments to text. run() throws InputError for bad arguments; it runs on a worker
// thread and must not touch shared state without its own locking.
class Tool {
 public:
  virtual ~Tool() = default;
  virtual std::string name() const = 0;
  // {"type": "function", "function": {"name", "description", "parameters"}} (OpenAI format).
  virtual nlohmann::json schema() const = 0;
  virtual std::string run(const nlohmann::json& arguments) const = 0;
};

struct ToolLimits {
  double timeout_s = 5.0;         // a call's wall-clock limit
  size_t max_output_chars = 512;  // longer outputs are cut, with a note of how much
  // Hung calls are abandoned on their thread (a thread cannot be killed); past this many still
  // running, further calls are refused with an error instead of starting more threads.
  int max_abandoned = 8;
};

class ToolRunner {
 public:
  explicit ToolRunner(ToolLimits limits = {});
  // Registers `tool` under its name; InputError when the name is taken.
  void add(std::shared_ptr<const Tool> tool);
  // Runs `call` within the limits. Never throws for anything the call or the tool did.
  ToolResult call(const ToolCall& call) const;
  // Runs independent calls (one turn's) concurrently: the turn waits for the slowest, not the sum.
  std::vector<ToolResult> call_all(const std::vector<ToolCall>& calls) const;
  // The tools' schemas, in name order (the chat template's `tools`).
  nlohmann::json schemas() const;
  int abandoned() const { return abandoned_->load(); }

 private:
  ToolLimits limits_;
  std::map<std::string, std::shared_ptr<const Tool>> tools_;
  std::shared_ptr<std::atomic<int>> abandoned_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace streamrl::tools
