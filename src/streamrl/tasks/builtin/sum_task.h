// "sum", the default task: add k single digits left to right with a running total. k is
// heavy-tailed and visible in the prompt; carries (the widths of the totals) vary the length
// within one k.
#pragma once

#include <cstdint>
#include <span>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "4+7+9=", demonstration "4+7=11;11+9=20;#20", reference "20". Each step reads only the
// previous total and the next operand, which a tiny char-level model can learn.
class SumTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

inline constexpr int kSumMinOperands = 2;
inline constexpr int kSumMaxOperands = 30;

// The problem of adding `operands` left to right, in the format above for operands of any width
// ("17+5+230=" -> "17+5=22;22+230=252;#252"). REQUIRES at least two non-negative operands.
// `seed` is left 0.
Problem make_sum_problem(std::span<const int64_t> operands);

}  // namespace streamrl::tasks
