// "calc": the agentic task. A long sum of products that the tiny policy cannot add up in its head
// but can with the `calc` tool: it copies up to three products at a time into a call, reads the
// value back, carries it into the next call, and finally writes the answer. Long-tailed in turns
// (1-4 tool calls) and tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "streamrl/tasks/task.h"

namespace streamrl::tasks {

// Prompt "381*24+905*61+77*18+40*3=", turns:
//   <tool_call>{"name":"calc","arguments":{"expression":"381*24+905*61+77*18"}}</tool_call>
//     then <tool_response>65695</tool_response> appended
//   <tool_call>{"name":"calc","arguments":{"expression":"65695+40*3"}}</tool_call>
//     then <tool_response>65815</tool_response> appended
//   #65815
class CalcTask final : public Task {
 public:
  std::string name() const override;
  std::string description() const override;
  Problem generate(uint64_t seed) const override;
  double verify(const Problem& problem, std::string_view completion) const override;
  std::vector<std::string> tools() const override { return {"calc"}; }
};

inline constexpr int kCalcMaxTerms = 12;
inline constexpr int kCalcTermsPerCall = 3;

// The problem sum_i a[i]*b[i]. REQUIRES a.size() == b.size() >= 1, values >= 0. `seed` is left 0.
Problem make_calc_problem(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace streamrl::tasks
