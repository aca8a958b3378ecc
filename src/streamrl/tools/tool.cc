#include "streamrl/tools/tool.h"

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "streamrl/core/errors.h"

namespace streamrl::tools {
namespace {

using Clock = std::chrono::steady_clock;

ToolResult error_result(std::string message) {
  ToolResult r;
  r.status = ToolStatus::kError;
  r.text = "error: " + std::move(message);
  return r;
}

// What the worker thread and the waiting caller share; the worker may outlive the caller.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;
  std::string text, error;
};

}  // namespace

ToolRunner::ToolRunner(ToolLimits limits) : limits_(limits) {
  if (!(limits_.timeout_s > 0) || limits_.max_output_chars < 1 || limits_.max_abandoned < 0) {
    throw InputError(
        "tool limits: timeout_s must be > 0, max_output_chars >= 1 and max_abandoned >= 0");
  }
}

void ToolRunner::add(std::shared_ptr<const Tool> tool) {
  const std::string name = tool->name();
  if (!tools_.emplace(name, std::move(tool)).second) {
    throw InputError("tool '" + name + "' is registered twice");
  }
}

nlohmann::json ToolRunner::schemas() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, tool] : tools_) out.push_back(tool->schema());
  return out;
}

ToolResult ToolRunner::call(const ToolCall& call) const {
  if (!call.error.empty()) return error_result(call.error);
  auto it = tools_.find(call.name);
  if (it == tools_.end()) {
    std::string names;
    for (const auto& [name, tool] : tools_) names += (names.empty() ? "" : ", ") + name;
    return error_result("unknown tool '" + call.name + "' (available: " + names + ")");
  }
  if (abandoned_->load() >= limits_.max_abandoned) {
    return error_result("tool '" + call.name + "' not run: " + std::to_string(abandoned_->load()) +
                        " earlier calls are still hung");
  }
  const auto t0 = Clock::now();
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, tool = it->second, args = call.arguments, abandoned = abandoned_] {
    std::string text, error;
    try {
      text = tool->run(args);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "the tool failed";
    } catch (...) {
      error = "the tool failed";
    }
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->text = std::move(text);
    outcome->error = std::move(error);
    outcome->done = true;
    if (outcome->abandoned) abandoned->fetch_sub(1);
    outcome->cv.notify_all();
  }).detach();

  std::unique_lock<std::mutex> lock(outcome->mu);
  const bool done = outcome->cv.wait_for(lock, std::chrono::duration<double>(limits_.timeout_s),
                                         [&] { return outcome->done; });
  ToolResult r;
  if (!done) {
    outcome->abandoned = true;
    abandoned_->fetch_add(1);
    std::ostringstream message;
    message << "tool '" << call.name << "' timed out after " << limits_.timeout_s << " s";
    r = error_result(message.str());
    r.status = ToolStatus::kTimeout;
  } else if (!outcome->error.empty()) {
    r = error_result(outcome->error);
  } else {
    r.text = std::move(outcome->text);
  }
  if (r.text.size() > limits_.max_output_chars) {
    const size_t cut = r.text.size() - limits_.max_output_chars;
    r.text.resize(limits_.max_output_chars);
    r.text += "... [output cut: " + std::to_string(cut) + " more characters]";
    r.truncated = true;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::vector<ToolResult> ToolRunner::call_all(const std::vector<ToolCall>& calls) const {
  if (calls.size() == 1) return {call(calls[0])};
  std::vector<std::future<ToolResult>> running;
  for (const ToolCall& c : calls) {
    running.push_back(std::async(std::launch::async, [this, &c] { return call(c); }));
  }
  std::vector<ToolResult> results;
  for (auto& r : running) results.push_back(r.get());
  return results;
}

}  // namespace streamrl::tools
