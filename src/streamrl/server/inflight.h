// The engine requests behind one HTTP request: submits them, hands their finished samples to the
// HTTP thread that waits for them, and aborts whatever is unfinished when it is destroyed (the
// client went away, the request timed out, or the server is stopping). Cancellation is RAII, so no
// exit path of a handler can leak engine work.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "streamrl/engine/engine.h"
#include "streamrl/engine/tool_turns.h"

namespace streamrl::server {

// One prompt to run, as parsed from either API (OpenAI or native).
struct PromptJob {
  std::vector<int32_t> prompt_ids;
  int n = 1;
  engine::SamplingParams params;
  double length_estimate = 0;  // for LPT admission
  // Native API "tools": the engine runs each sample's tool rollout to its end
  // (engine/tool_turns.h), each call started as its closing tag is sampled.
  engine::ToolTurnHooks turn_hooks;
};

// What a request's sampling fields default to when the client leaves them out: the checkpoint's
// generation_config.json values where it has them (`streamrl serve`), else these.
struct RequestDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0 = no limit
  // Tokens that end every sample unless the request says "ignore_eos", besides the tokenizer's
  // EOS (always included): e.g. the EOS ids of generation_config.json.
  std::vector<int32_t> stop_token_ids;
};

// What happened to a job's samples, with the position of the job in submission order: a token
// sampled (only for jobs submitted with per-token events) or a sample finished.
struct InflightEvent {
  size_t job = 0;
  std::optional<engine::Sample> sample;  // set when a sample finished
  int32_t sample_index = 0;              // otherwise: a token of this sample
  int32_t token = 0;
  float logprob = 0;
  std::vector<engine::TokenLogprob> top;
};

// One HTTP thread uses an Inflight; the engine thread only pushes samples into it.
class Inflight {
 public:
  // `engine` must outlive this object; `aborted` counts engine requests aborted by destructors.
  Inflight(engine::Engine& engine, std::atomic<int64_t>& aborted);
  ~Inflight();  // aborts every submitted request that still has unfinished samples
  Inflight(const Inflight&) = delete;
  Inflight& operator=(const Inflight&) = delete;

  // Submits `job` as one engine request under a process-unique engine id, with per-token events
  // when `tokens`. Its random streams are keyed by its prompt, so the seed, prompt and sample index
  // alone decide its samples. Throws InputError from Engine::add_request (a prompt that can never
  // fit).
  void submit(const PromptJob& job, bool tokens = false);

  // The next event, waiting at most `timeout`; nullopt when none arrived.
  std::optional<InflightEvent> next(std::chrono::milliseconds timeout);

  // Finishes sample `sample_index` of job `job` early (a stop sequence matched;
  // Engine::stop_sample).
  void stop(size_t job, int32_t sample_index);

  // Samples submitted but not yet returned by next().
  int64_t remaining() const { return remaining_; }

 private:
  struct Mailbox;  // shared with the engine callbacks, which may outlive this object

  engine::Engine& engine_;
  std::atomic<int64_t>& aborted_;
  std::shared_ptr<Mailbox> mailbox_;
  std::vector<int64_t> engine_ids_;  // per job
  std::vector<int> unfinished_;      // per job: samples not yet returned
  int64_t remaining_ = 0;
};

}  // namespace streamrl::server
