// Tool-using rollouts run by the engine itself (Request::on_turn): when a turn ends, its tool calls
// run and their rendered results become the next turn's prefill. The RL trainer's generators and
// `streamrl serve` (the native API's "tools") use the same rule, so a rollout is the same wherever
// it runs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/engine/engine.h"
#include "streamrl/tokenizer/tokenizer.h"
#include "streamrl/tools/tool.h"
#include "streamrl/tools/tool_call_parser.h"

namespace streamrl::engine {

// What follows a finished turn of a tool-using rollout: the calls in `reply` (the turn's text) run
// through `runner`, their results rendered as the next user-side tokens. nullopt ends the rollout:
// no call, a turn cut off by its cap (`stopped` false), or `turns` already at max_turns.
struct ToolTurn {
  std::vector<int32_t> appended;
  int calls = 0;
  int errors = 0;  // calls answered with an error
};
std::optional<ToolTurn> next_tool_turn(const std::string& reply, bool stopped, int turns,
                                       int max_turns, const tools::ToolRunner& runner,
                                       const tokenizer::Tokenizer& tok);

// next_tool_turn's two halves: the calls to run (none: the rollout ends), a quick parse; and
// running them, the slow part.
std::vector<tools::ToolCall> turn_tool_calls(const std::string& reply, bool stopped, int turns,
                                             int max_turns);
ToolTurn run_tool_calls(const std::vector<tools::ToolCall>& calls, const tools::ToolRunner& runner,
                        const tokenizer::Tokenizer& tok);

// The hooks that run tool rollouts to their end inside the engine, wherever it runs (the
// trainer's thread, an SGS instance's, a server's): the generator, the pool and the trainer see
// only whole trajectories. A turn is parsed on the engine thread; its calls run concurrently, off
// it (Request::on_turn), each bounded by the runner's timeout. With `pipelined` (Teola's decoding
// pipelining) on_turn_token starts each call the moment its closing tag is sampled, so the tool
// runs while the turn still decodes; the turn's end then waits only for what is left. `tok` must
// outlive the engines. `on_calls`, when set, sees each turn that called tools (on the thread that
// ran them).
using ToolTurnObserver = std::function<void(const Sample&, const ToolTurn&)>;
struct ToolTurnHooks {
  TurnCallback on_turn;
  TurnProgress on_turn_token;   // empty when not pipelined
  TurnProgress on_rollout_end;  // likewise: forgets the calls an aborted turn started
  void attach(Request& r) const {
    r.on_turn = on_turn;
    r.on_turn_token = on_turn_token;
    r.on_rollout_end = on_rollout_end;
  }
};
ToolTurnHooks tool_turns(std::shared_ptr<const tools::ToolRunner> runner,
                         const tokenizer::Tokenizer& tok, int max_turns,
                         ToolTurnObserver on_calls = nullptr, bool pipelined = true);

}  // namespace streamrl::engine
