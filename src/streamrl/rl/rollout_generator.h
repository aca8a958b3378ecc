// The generation side of an RL run (DESIGN.md §1): one continuous-batching engine that streams
// every finished sample into a queue the trainer drains. Colocated, it shares the trainer's module
// and runs on the caller's thread when asked; dedicated, it owns a copy of the weights and runs on
// its own thread with its own core budget, receiving new weights through update_weights().
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "streamrl/engine/engine.h"
#include "streamrl/engine/engine_thread.h"

namespace streamrl::rl {

// Finished samples in completion order; any thread may push, one consumer pops.
class SampleQueue {
 public:
  void push(engine::Sample sample);
  // The oldest sample, or nullopt when none arrived within `timeout`.
  std::optional<engine::Sample> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<engine::Sample> samples_;
};

class RolloutGenerator {
 public:
  // Colocated: `model` is the trainer's own module; nothing runs until drive_until_idle().
  static std::unique_ptr<RolloutGenerator> colocated(model::CausalLM model,
                                                     const engine::EngineConfig& config,
                                                     int64_t weight_version);
  // Dedicated: `model` is a private copy; the engine thread starts at once with `threads` cores.
  static std::unique_ptr<RolloutGenerator> dedicated(model::CausalLM model,
                                                     const engine::EngineConfig& config,
                                                     int64_t weight_version, int threads);
  ~RolloutGenerator();

  // Queues a request; its samples go to queue() as they finish.
  void submit(engine::Request request);
  SampleQueue& queue() { return queue_; }

  // Colocated only: runs the engine on this thread until nothing is waiting or running.
  void drive_until_idle();

  // Dedicated only: the in-process weight channel. Copies the parameters of `trainer` (so training
  // may continue at once) and installs them as `version` at the engine's next step boundary.
  void update_weights(int64_t version, model::CausalLM& trainer);

  // Colocated only: the trainer changed the shared module in place; later samples carry `version`.
  void set_weight_version(int64_t version);

  // Throws RuntimeFailure when the engine thread has died (with its error).
  void check_alive() const;

  bool dedicated() const { return thread_ != nullptr; }
  double busy_seconds() const { return engine_->stats().busy_seconds; }

 private:
  RolloutGenerator(model::CausalLM model, const engine::EngineConfig& config,
                   int64_t weight_version);

  SampleQueue queue_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::EngineThread> thread_;
};

}  // namespace streamrl::rl
