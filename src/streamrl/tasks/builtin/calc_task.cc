// The "calc" task: sums of products solved with the calc tool, a few products per call.
#include "streamrl/tasks/builtin/calc_task.h"

#include <cassert>
#include <nlohmann/json.hpp>
#include <string>

#include "streamrl/tasks/answer.h"
#include "streamrl/tasks/builtin/numbers.h"
#include "streamrl/tasks/rng.h"
#include "streamrl/tools/tool.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::tasks {
namespace {

// Pareto(alpha 1.3, scale 2) over 2..12 products: two or three for most problems (one call), up
// to twelve (four calls) for a few.
const std::vector<uint32_t>& term_weights() {
  static const std::vector<uint32_t> weights = pareto_weights(1.3, 2.0, 2, kCalcMaxTerms);
  return weights;
}

std::string calc_call(const std::string& expression) {
  return tools::format_tool_call("calc", {{"expression", expression}});
}

std::string calc_response(int64_t value) {
  tools::ToolResult r;
  r.text = std::to_string(value);
  return tools::render_plain_tool_turn({r});
}

}  // namespace

std::string CalcTask::name() const { return "calc"; }

std::string CalcTask::description() const {
  return "sum of 2-12 products (count heavy-tailed) through the calc tool, three products per "
         "call, carrying the value: 381*24+905*61+77*18+40*3= -> "
         "<tool_call>{...\"381*24+905*61+77*18\"...}</tool_call> ... #65815";
}

Problem CalcTask::generate(uint64_t seed) const {
  Rng rng(seed);
  const int terms = 2 + static_cast<int>(rng.weighted(term_weights()));
  std::vector<int64_t> a, b;
  for (int i = 0; i < terms; ++i) {
    a.push_back(draw_number(rng, static_cast<int>(rng.uniform(2, 3))));
    int64_t factor = 0;  // products by 0 or 1 teach nothing
    while (factor < 2) factor = draw_number(rng, static_cast<int>(rng.uniform(1, 2)));
    b.push_back(factor);
  }
  Problem p = make_calc_problem(a, b);
  p.seed = seed;
  return p;
}

double CalcTask::verify(const Problem& problem, std::string_view completion) const {
  return score_marked_answer(problem.reference, completion);
}

Problem make_calc_problem(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  assert(!a.empty() && a.size() == b.size());
  Problem p;
  int64_t total = 0;
  std::string expression;
  int in_call = 0, calls = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string product = std::to_string(a[i]) + "*" + std::to_string(b[i]);
    p.prompt += (i ? "+" : "") + product;
    expression += (expression.empty() ? "" : "+") + product;
    total += a[i] * b[i];
    if (++in_call == kCalcTermsPerCall || i + 1 == a.size()) {
      p.turns.push_back({calc_call(expression), calc_response(total)});
      ++calls;
      expression = std::to_string(total);  // the next call starts from the value read back
      in_call = 0;
    }
  }
  p.prompt += "=";
  p.reference = std::to_string(total);
  p.turns.push_back({std::string(1, kAnswerMarker) + p.reference, ""});
  for (const auto& t : p.turns) p.demonstration += t.reply + t.appended;
  p.difficulty = difficulty_from_steps(calls);
  p.visible_size = static_cast<int>(a.size());
  return p;
}

}  // namespace streamrl::tasks
