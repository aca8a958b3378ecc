// "collatz": iterate the Collatz map from an odd n until the value drops below n. The number of
// steps depends on the value, not its width, so this task's length is mostly hidden from the
// prompt (27 takes 96 steps, 29 takes 3). Like "mul", its multi-digit arithmetic is beyond the tiny
// CPU policy's SFT budget (~0% after 20k demonstrations); it is here for larger models.
#pragma once

#include <cstdint>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "collatz(7)=", demonstration "22,11,34,17,52,26,13,40,20,10,5;#5": each value is the
// previous one halved when even, or times 3 plus 1 when odd; the answer is the first value below
// the start.
class CollatzTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
};

// Starts whose demonstration would be longer than this are redrawn, which trims the rare
// trajectories of several hundred steps to keep sequences CPU-sized.
inline constexpr size_t kCollatzMaxDemonstrationChars = 400;

// The problem for start n. REQUIRES n >= 2. `seed` is left 0.
Problem make_collatz_problem(int64_t n);

}  // namespace streamrl::tasks
