// Wall-clock timing on the monotonic clock: one helper for every stage timer and bench.
#pragma once

#include <chrono>

namespace streamrl::core {

using Clock = std::chrono::steady_clock;

// Seconds elapsed since `t0`.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace streamrl::core
