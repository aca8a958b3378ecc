#include "streamrl/engine/engine_thread.h"

#include "streamrl/core/log.h"

namespace streamrl::engine {

EngineThread::EngineThread(Engine& engine, std::function<void()> on_start,
                           OnEngineFailure on_failure)
    : engine_(engine),
      on_failure_(on_failure),
      thread_([this, on_start = std::move(on_start)] { loop(on_start); }) {}

EngineThread::~EngineThread() { stop(); }

void EngineThread::loop(const std::function<void()>& on_start) {
  if (on_start) on_start();
  while (!stop_.load()) {
    try {
      if (!engine_.step()) engine_.wait_for_work(std::chrono::milliseconds(20));
      continue;
    } catch (const std::exception& e) {
      if (on_failure_ == OnEngineFailure::kStop) {
        SLOG(kError) << "engine thread stopped: " << e.what();
        std::lock_guard<std::mutex> lock(mu_);
        error_ = e.what();
        return;
      }
      SLOG(kError) << "engine step failed, aborting its requests and reloading the last good "
                   << "weights: " << e.what();
      std::lock_guard<std::mutex> lock(mu_);
      last_failure_ = e.what();
    }
    failures_.fetch_add(1);
    try {
      engine_.recover();
    } catch (const std::exception& e) {
      SLOG(kError) << "engine recovery failed, engine thread stopped: " << e.what();
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::string("recovery failed: ") + e.what();
      return;
    }
  }
}

void EngineThread::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string EngineThread::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::string EngineThread::last_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_failure_;
}

}  // namespace streamrl::engine
