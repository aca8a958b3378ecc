// splitmix64 and the integer-only draws built on it.
#include "streamrl/tasks/rng.h"

#include <cassert>
#include <cmath>

namespace streamrl::tasks {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return mix64(state_);
}

int64_t Rng::uniform(int64_t lo, int64_t hi) {
  assert(lo <= hi);
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (range == 0) return static_cast<int64_t>(next());  // the whole 64-bit range
  // Lemire's multiply-shift with rejection of the short final interval: exact and fast.
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * range;
  if (static_cast<uint64_t>(m) < range) {
    const uint64_t threshold = (0 - range) % range;
    while (static_cast<uint64_t>(m) < threshold) {
      m = static_cast<unsigned __int128>(next()) * range;
    }
  }
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + static_cast<uint64_t>(m >> 64));
}

size_t Rng::weighted(std::span<const uint32_t> weights) {
  uint64_t total = 0;
  for (uint32_t w : weights) total += w;
  assert(total > 0);
  uint64_t r = static_cast<uint64_t>(uniform(0, static_cast<int64_t>(total) - 1));
  for (size_t i = 0; i < weights.size(); ++i) {
    if (r < weights[i]) return i;
    r -= weights[i];
  }
  return weights.size() - 1;
}

std::vector<uint32_t> pareto_weights(double alpha, double scale, int lo, int hi) {
  // P(k <= K) = 1 - (1 + (K - lo + 1) / scale)^-alpha, from floor(scale * (X - 1)) <= K - lo.
  auto cdf = [&](int k) { return 1.0 - std::pow(1.0 + (k - lo + 1) / scale, -alpha); };
  std::vector<uint32_t> weights;
  double previous = 0.0;
  for (int k = lo; k <= hi; ++k) {
    const double c = cdf(k);
    weights.push_back(static_cast<uint32_t>(std::lround((c - previous) * 1e6)));
    previous = c;
  }
  return weights;
}

}  // namespace streamrl::tasks
