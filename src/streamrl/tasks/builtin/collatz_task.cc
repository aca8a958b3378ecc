// The "collatz" task: value-dependent trajectory lengths behind a 2-4 digit prompt.
#include "streamrl/tasks/builtin/collatz_task.h"

#include <cassert>
#include <string>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/builtin/numbers.h"
#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {

std::string CollatzTask::name() const { return "collatz"; }

std::string CollatzTask::description() const {
  return "Collatz steps (n/2 if even, 3n+1 if odd) from an odd 2-4 digit n until below n; length "
         "mostly hidden: collatz(7)= -> 22,11,34,17,52,26,13,40,20,10,5;#5";
}

Problem CollatzTask::generate(uint64_t seed) const {
  Rng rng(seed);
  // Even starts finish in one halving, so only odd ones are drawn; the 2-4 digit range keeps
  // single-digit starts from repeating the same handful of prompts.
  while (true) {
    const int64_t n = draw_number(rng, static_cast<int>(rng.uniform(2, 4))) | 1;
    Problem p = make_collatz_problem(n);
    if (p.demonstration.size() <= kCollatzMaxDemonstrationChars) {
      p.seed = seed;
      return p;
    }
  }
}

double CollatzTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

Problem make_collatz_problem(int64_t n) {
  assert(n >= 2);
  Problem p;
  p.prompt = "collatz(" + std::to_string(n) + ")=";
  int steps = 0;
  int64_t x = n;
  do {
    x = x % 2 == 0 ? x / 2 : 3 * x + 1;
    if (steps++ > 0) p.demonstration += ",";
    p.demonstration += std::to_string(x);
  } while (x >= n);
  p.reference = std::to_string(x);
  p.demonstration += ";";
  p.demonstration += kAnswerMarker + p.reference;
  p.difficulty = difficulty_from_steps(steps);
  p.visible_size = static_cast<int>(std::to_string(n).size());
  return p;
}

}  // namespace streamrl::tasks
