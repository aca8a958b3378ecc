#include "streamrl/core/worker_pool.h"

namespace streamrl::core {

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    // Every queued task needs an idle thread of its own; otherwise it would wait for a running one.
    if (queue_.size() > static_cast<size_t>(idle_)) threads_.emplace_back([this] { work(); });
  }
  cv_.notify_one();
}

int WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

int WorkerPool::idle_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

void WorkerPool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace streamrl::core
