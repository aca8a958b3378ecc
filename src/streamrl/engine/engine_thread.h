// Runs an Engine's step loop on a dedicated thread, so callers only add requests and receive
// finished samples through their callbacks (streaming).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "streamrl/engine/engine.h"

namespace streamrl::engine {

// What the loop does when a step throws.
enum class OnEngineFailure {
  kStop,     // the loop ends; error() says why (a trainer's pool fails its run)
  kRecover,  // Engine::recover() and serve on; failures() counts them (a server stays up)
};

class EngineThread {
 public:
  // `engine` must outlive this object. `on_start` runs first on the new thread (e.g. to apply the
  // role's core budget, which is per thread for ATen).
  explicit EngineThread(Engine& engine, std::function<void()> on_start = {},
                        OnEngineFailure on_failure = OnEngineFailure::kStop);
  ~EngineThread();  // stop() and join
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  void stop();

  // Empty while the loop runs; the exception message once it stopped on a failure (kStop, or a
  // recovery that itself failed).
  std::string error() const;
  // Steps that threw and were recovered from, and the last one's message ("" when none).
  int64_t failures() const { return failures_.load(); }
  std::string last_failure() const;

 private:
  void loop(const std::function<void()>& on_start);

  Engine& engine_;
  const OnEngineFailure on_failure_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> failures_{0};
  mutable std::mutex mu_;
  std::string error_;
  std::string last_failure_;
  std::thread thread_;
};

}  // namespace streamrl::engine
