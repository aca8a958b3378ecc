// The registry of built-in tasks.
#include "streamrl/tasks/task.h"

#include <algorithm>
#include <bit>

#include "streamrl/core/errors.h"
#include "streamrl/tasks/builtin/calc_task.h"
#include "streamrl/tasks/builtin/chain_task.h"
#include "streamrl/tasks/builtin/collatz_task.h"
#include "streamrl/tasks/builtin/mul_task.h"
#include "streamrl/tasks/builtin/retrieve_task.h"
#include "streamrl/tasks/builtin/sum_task.h"

namespace streamrl::tasks {
namespace {

// Default first; tasks are stateless, so one shared instance of each serves every thread.
const std::vector<const Task*>& builtin_tasks() {
  static const SumTask sum;
  static const ChainTask chain;
  static const MulTask mul;
  static const CollatzTask collatz;
  static const CalcTask calc;
  static const RetrieveTask retrieve;
  static const std::vector<const Task*> tasks = {&sum, &chain, &mul, &collatz, &calc, &retrieve};
  return tasks;
}

}  // namespace

const Task& get_task(std::string_view name) {
  for (const Task* t : builtin_tasks()) {
    if (t->name() == name) return *t;
  }
  std::string known;
  for (const std::string& n : task_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown task '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const Task* t : builtin_tasks()) names.push_back(t->name());
  return names;
}

std::string default_task_name() { return builtin_tasks().front()->name(); }

int difficulty_from_steps(int steps) {
  if (steps <= 1) return 0;
  return std::min(kMaxDifficulty,
                  static_cast<int>(std::bit_width(static_cast<unsigned>(steps))) - 1);
}

}  // namespace streamrl::tasks
