// Multi-turn, tool-using rollouts on one engine. Each sample keeps its KV cache across turns: a
// turn that ends with tool calls gets the results appended (tools::render_plain_tool_turn) and
// only those tokens prefilled, and the next turn is sampled, until a turn without a call, a turn
// cut off by its token cap, max_turns, or the engine's max_seq_len. Rollouts that finish a turn
// continue at once, so turns of different rollouts share decode steps. That default way is the
// trainer's and `streamrl serve`'s: the engine runs the turns itself (engine::tool_turns), each
// turn's tools off its thread while the other rollouts decode.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamrl/engine/engine.h"
#include "streamrl/engine/tool_turns.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/task.h"
#include "streamrl/tokenizer/tokenizer.h"
#include "streamrl/tools/tool.h"

namespace streamrl::rl {

struct ToolRolloutConfig {
  int max_turns = 8;  // replies per rollout, the last one included
  // The slower ways agent frameworks run rollouts, for `bench workflow`'s ablation:
  // keep_kv false: each turn is a fresh request that prefills the whole conversation again;
  // turn_barrier true: finished turns wait until no turn is running, then all continue together.
  bool keep_kv = true;
  bool turn_barrier = false;
  // With keep_kv and no turn barrier: the engine runs the turns (true, the trainer's way) or this
  // thread does, tools inline, between steps (false).
  bool engine_turns = true;
  // With engine_turns: each call starts as its closing tag is sampled (decoding pipelining, the
  // trainer's way) or when the turn ends (false).
  bool pipeline_calls = true;
  // Seconds after the start at which each request (by position) is submitted, non-decreasing: an
  // open workload, as a server sees one (`bench workflow`'s online figures). Empty: all at once.
  std::vector<double> arrival_s;
};

struct ToolRollout {
  // Every turn and appended result in output_ids; sampled_mask marks the policy's tokens (all of
  // them when the rollout has one turn: then it is empty, as for any one-turn sample).
  engine::Sample sample;
  int tool_calls = 0;
  int tool_errors = 0;  // calls answered with an error (malformed, unknown tool, timeout, ...)
  double seconds = 0;   // from its request's submission to this rollout's end
};

// Runs `requests` (prompt ids, n, sampling params; hold_kv and the callbacks are set here, and
// params.max_new_tokens caps every turn) to the end of their rollouts on `engine`, stepping
// it on this thread. Returns the rollouts ordered by request, then sample index.
std::vector<ToolRollout> run_tool_rollouts(engine::Engine& engine,
                                           std::vector<engine::Request> requests,
                                           const tools::ToolRunner& runner,
                                           const tokenizer::Tokenizer& tok,
                                           const ToolRolloutConfig& config);

// `n` rollouts of each of `problems` (request id = index) with `task`'s tools (or `runner`'s),
// greedy or sampled per `params`, on a fresh engine over `model` with `max_batch_size` slots of
// the model's full length.
std::vector<ToolRollout> run_task_rollouts(model::CausalLM& model, const PromptEncoder& prompts,
                                           const tasks::Task& task,
                                           const std::vector<tasks::Problem>& problems, int n,
                                           const engine::SamplingParams& params, int max_batch_size,
                                           const ToolRolloutConfig& config = {},
                                           const tools::ToolRunner* runner = nullptr);

}  // namespace streamrl::rl
