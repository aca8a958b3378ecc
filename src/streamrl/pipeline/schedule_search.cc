#include "streamrl/pipeline/schedule_search.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

namespace streamrl::pipeline {

SearchResult search_schedule(const OpCosts& costs, const SearchOptions& options,
                             const ScheduleEvaluator& evaluate) {
  const auto t0 = std::chrono::steady_clock::now();
  const int P = costs.stages, V = costs.chunks, M = costs.micro_batches;
  SearchResult best;
  auto consider = [&](Schedule schedule, const std::vector<int>& order, const char* name) {
    const double step = evaluate(schedule);
    if (best.candidates++ == 0 || step < best.step_s) {
      best.schedule = std::move(schedule), best.step_s = step, best.order = order;
      best.candidate = name;
    }
  };
  auto consider_order = [&](const std::vector<int>& order, const char* name) {
    DynamicOptions o = options.base;
    o.order = order;
    consider(dynamic_schedule(costs, o).schedule, order, name);
  };

  std::vector<int> given = options.base.order;
  if (given.empty()) {
    given.resize(M);
    std::iota(given.begin(), given.end(), 0);
  }
  // Checks the costs and the order before anything reads them.
  DynamicOptions first = options.base;
  first.order = given;
  Schedule given_schedule = dynamic_schedule(costs, first).schedule;

  // 1. The static order, where it exists for M and stays within the memory budget.
  if (V == 1 || M <= P || M % P == 0) {
    Schedule s = interleaved_one_f_one_b(P, V, M);
    const std::vector<double> peak = peak_activation_bytes(s, costs);
    if (options.base.activation_budget_bytes <= 0 ||
        *std::max_element(peak.begin(), peak.end()) <= options.base.activation_budget_bytes) {
      consider(std::move(s), {}, "static");
    }
  }
  // 2. The dynamic schedule under fixed orders, then random ones.
  std::vector<double> work(M, 0);
  for (int s = 0; s < P; ++s) {
    for (int c = 0; c < V; ++c) {
      for (int m = 0; m < M; ++m) work[m] += costs.forward(s, c, m) + costs.backward(s, c, m);
    }
  }
  std::vector<int> longest = given;
  std::stable_sort(longest.begin(), longest.end(), [&](int a, int b) { return work[a] > work[b]; });
  const std::vector<int> shortest(longest.rbegin(), longest.rend());
  consider(std::move(given_schedule), given, "given");
  consider_order(longest, "longest_first");
  consider_order(shortest, "shortest_first");
  std::mt19937_64 rng(options.seed);
  std::vector<int> order = given;
  while (best.candidates < options.max_candidates &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
             options.time_budget_s) {
    std::shuffle(order.begin(), order.end(), rng);
    consider_order(order, "random");
  }
  return best;
}

}  // namespace streamrl::pipeline
