#include "streamrl/core/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace streamrl::core {
namespace {

// Tasks that wait for each other all run at once: none queues behind a running one.
TEST(WorkerPool, EveryTaskGetsAThreadWhenNoneIsIdle) {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool all_met = true;
  {
    WorkerPool pool;
    for (int i = 0; i < 4; ++i) {
      pool.submit([&] {
        std::unique_lock<std::mutex> lock(mu);
        ++arrived;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == 4; })) {
          all_met = false;
        }
      });
    }
  }  // the destructor waits for all four
  EXPECT_EQ(arrived, 4);
  EXPECT_TRUE(all_met) << "a task waited for another to finish before it started";
}

// One task after another reuses the thread; the destructor runs what is still queued.
TEST(WorkerPool, ThreadsAreKeptForLaterTasks) {
  std::atomic<int> ran{0};
  WorkerPool pool;
  for (int i = 0; i < 20; ++i) {
    pool.submit([&] { ran.fetch_add(1); });
    // Until the task ran and its thread waits again.
    for (int w = 0; w < 5000 && (ran.load() <= i || pool.idle_threads() == 0); ++w) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  EXPECT_EQ(ran.load(), 20);
  EXPECT_EQ(pool.threads(), 1);
}

}  // namespace
}  // namespace streamrl::core
