// The "mul" task: heavy-tailed multiplier widths, partial-product scratchpad.
#include "streamrl/tasks/builtin/mul_task.h"

#include <cassert>
#include <string>
#include <vector>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/builtin/numbers.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {
namespace {

// Pareto(alpha 1.6, scale 2) over 1..6 multiplier digits: one digit for ~48% of problems, six for
// ~4%, so demonstrations have p90/p50 ~6 and p99/p50 ~11 and stay under ~250 characters.
const std::vector<uint32_t>& multiplier_digit_weights() {
  static const std::vector<uint32_t> weights = pareto_weights(1.6, 2.0, 1, kMulMaxMultiplierDigits);
  return weights;
}

}  // namespace

std::string MulTask::name() const { return "mul"; }

std::string MulTask::description() const {
  return "multiply a 1-3 digit number by a 1-6 digit one (width heavy-tailed) via partial "
         "products: 47*306= -> 47*6=282;47*300=14100;282+14100=14382;#14382";
}

Problem MulTask::generate(uint64_t seed) const {
  Rng rng(seed);
  // Multiplying by 0 or 1 teaches nothing, so both factors start at 2.
  int64_t a = 0;
  while (a < 2) a = draw_number(rng, static_cast<int>(rng.uniform(1, 3)));
  const int width = 1 + static_cast<int>(rng.weighted(multiplier_digit_weights()));
  int64_t b = 0;
  while (b < 2) b = draw_number(rng, width);
  Problem p = make_mul_problem(a, b);
  p.seed = seed;
  return p;
}

double MulTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

Problem make_mul_problem(int64_t a, int64_t b) {
  assert(a >= 0 && b > 0);
  Problem p;
  const std::string as = std::to_string(a);
  const std::string bs = std::to_string(b);
  p.prompt = as + "*" + bs + "=";
  int steps = 0;
  int64_t total = 0;
  std::string zeros;
  for (auto digit = bs.rbegin(); digit != bs.rend(); ++digit, zeros += '0') {
    if (*digit == '0') continue;
    const int64_t partial = a * (*digit - '0') * power_of_ten(static_cast<int>(zeros.size()));
    const std::string ps = std::to_string(partial);
    p.demonstration += as + "*" + *digit + zeros + "=" + ps + ";";
    ++steps;
    if (steps > 1) {
      p.demonstration += std::to_string(total) + "+" + ps + "=" + std::to_string(total + partial);
      p.demonstration += ";";
      ++steps;
    }
    total += partial;
  }
  p.reference = std::to_string(total);
  p.demonstration += kAnswerMarker + p.reference;
  p.difficulty = difficulty_from_steps(steps);
  p.visible_size = static_cast<int>(bs.size());
  return p;
}

}  // namespace streamrl::tasks
