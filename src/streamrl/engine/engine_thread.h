// Runs an Engine's step loop on a dedicated thread, so callers only add requests and receive
// finished samples through their callbacks (streaming, DESIGN.md §1).
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "streamrl/engine/engine.h"

namespace streamrl::engine {

class EngineThread {
 public:
  // `engine` must outlive this object. `on_start` runs first on the new thread (e.g. to apply the
  // role's core budget, which is per thread for ATen).
  explicit EngineThread(Engine& engine, std::function<void()> on_start = {});
  ~EngineThread();  // stop() and join
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  void stop();

  // Empty while healthy; the exception message if a step failed (the loop then stops).
  std::string error() const;

 private:
  Engine& engine_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string error_;
  std::thread thread_;
};

}  // namespace streamrl::engine
