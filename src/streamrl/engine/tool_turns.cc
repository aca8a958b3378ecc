#include "streamrl/engine/tool_turns.h"

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "streamrl/core/worker_pool.h"
#include "streamrl/tools/tool_call_parser.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::engine {

std::vector<tools::ToolCall> turn_tool_calls(const std::string& reply, bool stopped, int turns,
                                             int max_turns) {
  if (!stopped || turns >= max_turns) return {};
  return tools::parse_tool_calls(reply);
}

namespace {

ToolTurn tool_turn_from(const std::vector<tools::ToolResult>& results,
                        const tokenizer::Tokenizer& tok) {
  ToolTurn next;
  for (const tools::ToolResult& r : results) {
    next.calls += 1;
    next.errors += r.status != tools::ToolStatus::kOk;
  }
  next.appended = tok.encode(tools::render_plain_tool_turn(results));
  return next;
}

bool same_call(const tools::ToolCall& a, const tools::ToolCall& b) {
  return a.name == b.name && a.arguments == b.arguments && a.error == b.error;
}

std::string turn_text(const Sample& s, size_t turn_start, const tokenizer::Tokenizer& tok) {
  const size_t start = std::min(turn_start, s.output_ids.size());
  return tok.decode(std::vector<int32_t>(s.output_ids.begin() + static_cast<std::ptrdiff_t>(start),
                                         s.output_ids.end()));
}

// Calls a turn started before it ended, per rollout (request id, sample index).
struct EarlyCalls {
  size_t turn_start = 0;
  std::vector<tools::ToolCall> calls;
  std::vector<std::shared_future<tools::ToolResult>> results;
};

struct PipelineState {
  std::mutex mu;
  // Erased when the turn ends (on_turn) or the rollout does (aborted mid-turn).
  std::map<std::pair<int64_t, int32_t>, EarlyCalls> early;
  // Last member: destroyed first, waiting for calls still out (each bounded by the timeout).
  core::WorkerPool workers;
};

}  // namespace

ToolTurn run_tool_calls(const std::vector<tools::ToolCall>& calls, const tools::ToolRunner& runner,
                        const tokenizer::Tokenizer& tok) {
  return tool_turn_from(runner.call_all(calls), tok);
}

std::optional<ToolTurn> next_tool_turn(const std::string& reply, bool stopped, int turns,
                                       int max_turns, const tools::ToolRunner& runner,
                                       const tokenizer::Tokenizer& tok) {
  const std::vector<tools::ToolCall> calls = turn_tool_calls(reply, stopped, turns, max_turns);
  if (calls.empty()) return std::nullopt;
  return run_tool_calls(calls, runner, tok);
}

ToolTurnHooks tool_turns(std::shared_ptr<const tools::ToolRunner> runner,
                         const tokenizer::Tokenizer& tok, int max_turns, ToolTurnObserver on_calls,
                         bool pipelined) {
  auto state = pipelined ? std::make_shared<PipelineState>() : nullptr;
  ToolTurnHooks hooks;
  hooks.on_turn = [runner, &tok, max_turns, on_calls = std::move(on_calls), state](
                      const Sample& s, size_t turn_start) -> TurnWork {
    EarlyCalls early;
    if (state) {
      std::lock_guard<std::mutex> lock(state->mu);
      auto it = state->early.find({s.request_id, s.sample_index});
      if (it != state->early.end()) {
        if (it->second.turn_start == turn_start) early = std::move(it->second);
        state->early.erase(it);
      }
    }
    std::vector<tools::ToolCall> calls = turn_tool_calls(
        turn_text(s, turn_start, tok), s.finish_reason == FinishReason::kStop, s.turns, max_turns);
    if (calls.empty()) return nullptr;  // calls started early finish unread
    // The early calls are the turn's first ones (the same parser saw a prefix of the same text).
    size_t reuse = 0;
    while (reuse < early.calls.size() && reuse < calls.size() &&
           same_call(early.calls[reuse], calls[reuse])) {
      ++reuse;
    }
    early.results.resize(reuse);
    // The observer sees the sample as it was when the turn ended.
    return [runner, &tok, on_calls, calls = std::move(calls), reuse, results = early.results,
            sample = on_calls ? s : Sample()]() {
      const std::vector<tools::ToolCall> rest(calls.begin() + static_cast<std::ptrdiff_t>(reuse),
                                              calls.end());
      // The rest run while the early calls finish: the turn waits for the slowest, not the sum.
      std::vector<tools::ToolResult> late = runner->call_all(rest), all;
      for (const auto& r : results) all.push_back(r.get());
      for (tools::ToolResult& r : late) all.push_back(std::move(r));
      ToolTurn next = tool_turn_from(all, tok);
      if (on_calls) on_calls(sample, next);
      return std::move(next.appended);
    };
  };
  if (!state) return hooks;
  hooks.on_turn_token = [runner, &tok, state](const Sample& s, size_t turn_start) {
    // Only a token that can close a tag is worth a parse of the turn so far.
    if (tok.decode({s.output_ids.back()}).find('>') == std::string::npos) return;
    const std::vector<tools::ToolCall> calls =
        tools::parse_tool_calls(turn_text(s, turn_start, tok));
    std::lock_guard<std::mutex> lock(state->mu);
    EarlyCalls& early = state->early[{s.request_id, s.sample_index}];
    if (early.turn_start != turn_start) early = EarlyCalls{turn_start, {}, {}};
    for (size_t i = early.calls.size(); i < calls.size(); ++i) {
      auto done = std::make_shared<std::promise<tools::ToolResult>>();
      early.results.push_back(done->get_future().share());
      early.calls.push_back(calls[i]);
      state->workers.submit(
          [runner, call = calls[i], done] { done->set_value(runner->call(call)); });
    }
  };
  hooks.on_rollout_end = [state](const Sample& s, size_t) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->early.erase({s.request_id, s.sample_index});  // its calls finish unread
  };
  return hooks;
}

}  // namespace streamrl::engine
