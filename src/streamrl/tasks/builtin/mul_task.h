// "mul": multiply a 1-3 digit number by a 1-6 digit one through partial products. The multiplier's
// width is heavy-tailed and visible; its zero digits (skipped) hide part of the length.
// Harder than the tiny CPU policy can learn in its SFT budget (a 0.9M-parameter model given 20k
// demonstrations solved ~2%); it is here for larger models.
#pragma once

#include <cstdint>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "47*306=", demonstration "47*6=282;47*300=14100;282+14100=14382;#14382": one partial
// product per non-zero multiplier digit, least significant first, each added to a running total.
class MulTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

inline constexpr int kMulMaxMultiplierDigits = 6;

// The problem a*b. REQUIRES a >= 0, b > 0. `seed` is left 0.
Problem make_mul_problem(int64_t a, int64_t b);

}  // namespace streamrl::tasks
