// How finished samples leave a generation pool: one sink type that both the
// in-process instance pool and the remote pool over `streamrl serve` call, and the thread-safe
// queue the RL controller drains.
#pragma once

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "streamrl/engine/engine.h"

namespace streamrl::sgs {

// The callables a SampleSink is made from: one told which instance produced the sample, or one
// that takes the sample only.
template <typename F>
concept InstanceSampleFn = std::invocable<F&, int, engine::Sample&&>;
template <typename F>
concept SampleOnlyFn = std::invocable<F&, engine::Sample&&> && !InstanceSampleFn<F>;

// Receives each finished sample (including aborted ones) with the index of the pool instance that
// produced it, on that instance's thread (local) or a client thread (remote): it must be
// thread-safe. Made implicitly from either kind of callable, so call sites pass lambdas directly.
class SampleSink {
 public:
  SampleSink() = default;  // empty: samples are dropped

  template <InstanceSampleFn F>
  SampleSink(F fn) : fn_(std::move(fn)) {}

  template <SampleOnlyFn F>
  SampleSink(F fn)
      : fn_([fn = std::move(fn)](int, engine::Sample&& s) mutable { fn(std::move(s)); }) {}

  void operator()(int instance, engine::Sample&& sample) const { fn_(instance, std::move(sample)); }
  explicit operator bool() const { return static_cast<bool>(fn_); }

 private:
  std::function<void(int instance, engine::Sample&& sample)> fn_;
};

// A thread-safe FIFO of finished samples, usable as a pool's sink.
class SampleQueue {
 public:
  void push(engine::Sample&& sample);
  // The oldest sample, waiting up to `timeout`; nullopt on timeout.
  std::optional<engine::Sample> pop(std::chrono::milliseconds timeout);
  std::vector<engine::Sample> drain();  // everything queued now, oldest first
  size_t size() const;
  SampleSink sink();  // pushes into this queue; the queue must outlive its users

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<engine::Sample> samples_;
};

}  // namespace streamrl::sgs
