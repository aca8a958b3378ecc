#include "streamrl/engine/engine_thread.h"

#include "streamrl/core/log.h"

namespace streamrl::engine {

EngineThread::EngineThread(Engine& engine, std::function<void()> on_start)
    : engine_(engine), thread_([this, on_start = std::move(on_start)] {
        if (on_start) on_start();
        try {
          while (!stop_.load()) {
            if (!engine_.step()) engine_.wait_for_work(std::chrono::milliseconds(20));
          }
        } catch (const std::exception& e) {
          SLOG(kError) << "engine thread stopped: " << e.what();
          std::lock_guard<std::mutex> lock(mu_);
          error_ = e.what();
        }
      }) {}

EngineThread::~EngineThread() { stop(); }

void EngineThread::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string EngineThread::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace streamrl::engine
