// The "sum" task: heavy-tailed operand counts, running-total scratchpad.
#include "streamrl/tasks/builtin/sum_task.h"

#include <cassert>
#include <string>
#include <vector>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {
namespace {

// Pareto(alpha 1.6, scale 3) over k = 2..30: k = 2 for ~37% of problems, median 3, p90 ~10,
// p99 ~24, so demonstrations have p90/p50 ~4 and p99/p50 ~10 and prompt plus demonstration stays
// under ~320 characters. The body is kept light on purpose: with 20k demonstrations a
// 0.9M-parameter model reached 97% / 52% / 5% greedy accuracy on 1 / 2-3 / 4-7 steps under this
// law, but only 27% / 7% / 3% under a heavier one (alpha 1.4, scale 4, up to 40 operands).
const std::vector<uint32_t>& operand_count_weights() {
  static const std::vector<uint32_t> weights =
      pareto_weights(1.6, 3.0, kSumMinOperands, kSumMaxOperands);
  return weights;
}

}  // namespace

std::string SumTask::name() const { return "sum"; }

std::string SumTask::description() const {
  return "add 2-30 digits (count heavy-tailed) with a running total: 4+7+9= -> "
         "4+7=11;11+9=20;#20";
}

Problem SumTask::generate(uint64_t seed) const {
  Rng rng(seed);
  const int k = kSumMinOperands + static_cast<int>(rng.weighted(operand_count_weights()));
  std::vector<int64_t> operands;
  // Single digits: with 1-2 or 1-3 digit operands the same model and budget as above stayed under
  // 5% greedy accuracy at every difficulty.
  for (int i = 0; i < k; ++i) operands.push_back(rng.uniform(0, 9));
  Problem p = make_sum_problem(operands);
  p.seed = seed;
  return p;
}

double SumTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

Problem make_sum_problem(std::span<const int64_t> operands) {
  assert(operands.size() >= 2);
  Problem p;
  int64_t total = operands[0];
  p.prompt = std::to_string(operands[0]);
  for (size_t i = 1; i < operands.size(); ++i) {
    const std::string x = std::to_string(operands[i]);
    p.prompt += "+" + x;
    p.demonstration += std::to_string(total) + "+" + x + "=" + std::to_string(total + operands[i]);
    p.demonstration += ";";
    total += operands[i];
  }
  p.prompt += "=";
  p.reference = std::to_string(total);
  p.demonstration += kAnswerMarker + p.reference;
  const int steps = static_cast<int>(operands.size()) - 1;
  p.difficulty = difficulty_from_steps(steps);
  p.visible_size = static_cast<int>(operands.size());
  return p;
}

}  // namespace streamrl::tasks
