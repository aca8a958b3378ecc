#include "streamrl/engine/tool_turns.h"

#include <algorithm>

#include "streamrl/tools/tool_call_parser.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::engine {

std::optional<ToolTurn> next_tool_turn(const std::string& reply, bool stopped, int turns,
                                       int max_turns, const tools::ToolRunner& runner,
                                       const tokenizer::Tokenizer& tok) {
  const std::vector<tools::ToolCall> calls = tools::parse_tool_calls(reply);
  if (calls.empty() || !stopped || turns >= max_turns) return std::nullopt;
  ToolTurn next;
  const std::vector<tools::ToolResult> results = runner.call_all(calls);
  for (const tools::ToolResult& r : results) {
    next.calls += 1;
    next.errors += r.status != tools::ToolStatus::kOk;
  }
  next.appended = tok.encode(tools::render_plain_tool_turn(results));
  return next;
}

TurnCallback tool_turns(std::shared_ptr<const tools::ToolRunner> runner,
                        const tokenizer::Tokenizer& tok, int max_turns, ToolTurnObserver on_calls) {
  return [runner = std::move(runner), &tok, max_turns, on_calls = std::move(on_calls)](
             const Sample& s, size_t turn_start) {
    const size_t start = std::min(turn_start, s.output_ids.size());
    const std::string reply = tok.decode(std::vector<int32_t>(
        s.output_ids.begin() + static_cast<std::ptrdiff_t>(start), s.output_ids.end()));
    std::optional<ToolTurn> next = next_tool_turn(reply, s.finish_reason == FinishReason::kStop,
                                                  s.turns, max_turns, *runner, tok);
    if (!next) return std::vector<int32_t>{};
    if (on_calls) on_calls(s, *next);
    return std::move(next->appended);
  };
}

}  // namespace streamrl::engine
