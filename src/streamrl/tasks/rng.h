// The small PRNG behind problem generation. Problems must be bit-identical for a seed on every
// platform, which std:: distributions do not promise, so every draw here is integer arithmetic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace streamrl::tasks {

// splitmix64's finaliser: a bijection on 64 bits that spreads every input bit over the output.
uint64_t mix64(uint64_t x);

// splitmix64 (Steele, Lea, Flood 2014). Not thread-safe; make one per problem.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next();

  // Uniform in [lo, hi], without modulo bias. REQUIRES lo <= hi.
  int64_t uniform(int64_t lo, int64_t hi);

  // Index i with probability weights[i] / sum(weights). REQUIRES a positive sum.
  size_t weighted(std::span<const uint32_t> weights);

 private:
  uint64_t state_;
};

// Integer weights for k = lo..hi proportional to the law of k = lo + floor(scale * (X - 1)) with
// X ~ Pareto(1, alpha), truncated at hi: a discrete heavy tail whose body width is `scale`.
// Weights are rounded to parts per million so that last-ulp differences between libm
// implementations cannot change a draw.
std::vector<uint32_t> pareto_weights(double alpha, double scale, int lo, int hi);

}  // namespace streamrl::tasks
