#include "streamrl/engine/tool_turns.h"

#include <algorithm>

#include "streamrl/tools/tool_call_parser.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::engine {

std::vector<tools::ToolCall> turn_tool_calls(const std::string& reply, bool stopped, int turns,
                                             int max_turns) {
  if (!stopped || turns >= max_turns) return {};
  return tools::parse_tool_calls(reply);
}

ToolTurn run_tool_calls(const std::vector<tools::ToolCall>& calls, const tools::ToolRunner& runner,
                        const tokenizer::Tokenizer& tok) {
  ToolTurn next;
  const std::vector<tools::ToolResult> results = runner.call_all(calls);
  for (const tools::ToolResult& r : results) {
    next.calls += 1;
    next.errors += r.status != tools::ToolStatus::kOk;
  }
  next.appended = tok.encode(tools::render_plain_tool_turn(results));
  return next;
}

std::optional<ToolTurn> next_tool_turn(const std::string& reply, bool stopped, int turns,
                                       int max_turns, const tools::ToolRunner& runner,
                                       const tokenizer::Tokenizer& tok) {
  const std::vector<tools::ToolCall> calls = turn_tool_calls(reply, stopped, turns, max_turns);
  if (calls.empty()) return std::nullopt;
  return run_tool_calls(calls, runner, tok);
}

TurnCallback tool_turns(std::shared_ptr<const tools::ToolRunner> runner,
                        const tokenizer::Tokenizer& tok, int max_turns, ToolTurnObserver on_calls) {
  return [runner = std::move(runner), &tok, max_turns, on_calls = std::move(on_calls)](
             const Sample& s, size_t turn_start) -> TurnWork {
    const size_t start = std::min(turn_start, s.output_ids.size());
    const std::string reply = tok.decode(std::vector<int32_t>(
        s.output_ids.begin() + static_cast<std::ptrdiff_t>(start), s.output_ids.end()));
    std::vector<tools::ToolCall> calls =
        turn_tool_calls(reply, s.finish_reason == FinishReason::kStop, s.turns, max_turns);
    if (calls.empty()) return nullptr;
    // The observer sees the sample as it was when the turn ended.
    return [runner, &tok, on_calls, calls = std::move(calls), sample = on_calls ? s : Sample()]() {
      ToolTurn next = run_tool_calls(calls, *runner, tok);
      if (on_calls) on_calls(sample, next);
      return std::move(next.appended);
    };
  };
}

}  // namespace streamrl::engine
