// A verifiable task: problems generated deterministically from a seed, and a reward
// for a completion. Built-in tasks live in builtin/, user JSONL datasets in dataset.h, and the
// train/eval split of a task's problems in split.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "streamrl/tokenizer/chat_template.h"

namespace streamrl::tasks {

struct Problem {
  // What the policy sees; ends exactly where the completion starts. For a chat problem (messages
  // non-empty) it is the conversation as JSON instead: its identity for the train/eval split and
  // for display, while the policy sees the messages rendered by the checkpoint's chat template
  // (rl::PromptEncoder).
  std::string prompt;
  std::string reference;  // the final answer the verifier compares against
  // A step-by-step completion: scratchpad, then the final answer in the format the verifier
  // expects. No EOS. Empty when the source has none (a JSONL record without "demonstration").
  std::string demonstration;
  int difficulty = 0;    // bucket for accuracy-by-difficulty, 0 = easiest; built-ins use 0..4
  int visible_size = 0;  // the part of the difficulty readable from the prompt; 0 when unknown
  uint64_t seed = 0;     // generate(seed) gives this problem back
  std::string source;    // "PATH:LINE" of a dataset record, for error messages; "" for built-ins
  // A chat problem's conversation up to the turn the policy answers (ends with a user message);
  // empty for a plain-text prompt.
  std::vector<tokenizer::ChatMessage> messages;
  // A tool-using demonstration, one entry per turn: what the policy writes (a tool call, or the
  // final answer), then, after the turn's end token, what the rollout appends (the rendered tool
  // results: context the policy reads, never trained on; empty after the last turn). Empty for a
  // one-turn problem. `demonstration` is then the turns' text joined, for display.
  struct Turn {
    std::string reply;
    std::string appended;
  };
  std::vector<Turn> turns;
};

// Abstract, stateless and thread-safe: every method may be called from any thread at once.
class Task {
 public:
  virtual ~Task() = default;

  virtual std::string name() const = 0;
  virtual std::string description() const = 0;

  // The same seed gives the same problem on every platform.
  virtual Problem generate(uint64_t seed) const = 0;

  // Reward in [0, 1] for `completion` (the generated text after the prompt, without EOS; for a
  // multi-turn rollout every turn and the appended tool results).
  virtual double verify(const Problem& problem, std::string_view completion) const = 0;

  // The built-in tools (tools/) a rollout offers the policy; empty: one-turn generation.
  virtual std::vector<std::string> tools() const { return {}; }
};

// A built-in task by name. Throws InputError listing the known names when there is none.
const Task& get_task(std::string_view name);

// Names of the built-in tasks, default first.
std::vector<std::string> task_names();

std::string default_task_name();

inline constexpr int kMaxDifficulty = 4;

// The difficulty bucket of a scratchpad of `steps` steps: floor(log2(steps)) capped at
// kMaxDifficulty, i.e. 1 step -> 0, 2-3 -> 1, 4-7 -> 2, 8-15 -> 3, 16 or more -> 4. Buckets by
// powers of two keep the heavy tail from spreading over many nearly empty buckets.
int difficulty_from_steps(int steps);

}  // namespace streamrl::tasks
