// Threads for short side tasks (a rollout's tool turn), kept between tasks instead of spawned per
// task. A task never queues behind another: when no thread is idle a new one starts, so a slow or
// hung task delays only itself, as a thread of its own would.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace streamrl::core {

class WorkerPool {
 public:
  WorkerPool() = default;
  // Runs the tasks still queued, waits for the running ones and joins every thread.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs `task` on an idle thread, or a new one. The task must not throw (it is the caller's
  // job to carry an error back); one that does terminates the process, as on a std::thread.
  void submit(std::function<void()> task);

  // Threads started so far (the most tasks that ever ran at once), and those waiting for a task.
  int threads() const;
  int idle_threads() const;

 private:
  void work();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

}  // namespace streamrl::core
