// "sum", the default task: add k numbers left to right with a running total. k is heavy-tailed
// and visible in the prompt; operand widths and carries vary the length within one k.
#pragma once

#include <cstdint>
#include <span>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "17+5+230=", demonstration "17+5=22;22+230=252;#252", reference "252". Each step reads
// only the previous total and the next operand, which a tiny char-level model can learn.
class SumTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

inline constexpr int kSumMinOperands = 2;
inline constexpr int kSumMaxOperands = 30;

// The problem of adding `operands` left to right. REQUIRES at least two non-negative operands.
// `seed` is left 0.
Problem make_sum_problem(std::span<const int64_t> operands);

}  // namespace streamrl::tasks
