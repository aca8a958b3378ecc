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
  // The P - 1 shortest fill the pipeline, then the rest longest first: the long micro-batches
  // start early without the first stages' fill waiting on them.
  std::vector<int> fill_then_longest(shortest.begin(), shortest.begin() + std::min(P - 1, M));
  fill_then_longest.insert(fill_then_longest.end(), longest.begin(),
                           longest.end() - std::min(P - 1, M));
  if (best.candidates < options.max_candidates) {
    consider_order(fill_then_longest, "fill_then_longest");
  }
  // Short at both ends, long in the middle: short fill and drain.
  std::vector<int> sandwich(M);
  for (int i = 0; i < M; ++i) {
    const int at = i / 2;
    sandwich[static_cast<size_t>(i % 2 == 0 ? at : M - 1 - at)] = shortest[static_cast<size_t>(i)];
  }
  if (best.candidates < options.max_candidates) consider_order(sandwich, "sandwich");
  // Then, within the budget, the best order so far with two micro-batches swapped (a hill
  // climb: a good order's neighbours beat random permutations of many micro-batches), every
  // third candidate a random permutation instead.
  std::mt19937_64 rng(options.seed);
  std::vector<int> order = given;
  for (int i = 0; best.candidates < options.max_candidates &&
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
                      options.time_budget_s;
       ++i) {
    if (best.order.empty() || M < 2 || i % 3 == 2) {
      std::shuffle(order.begin(), order.end(), rng);
      consider_order(order, "random");
      continue;
    }
    std::vector<int> swapped = best.order;
    std::uniform_int_distribution<int> at(0, M - 1);
    const int a = at(rng);
    int b = at(rng);
    if (b == a) b = (a + 1) % M;
    std::swap(swapped[static_cast<size_t>(a)], swapped[static_cast<size_t>(b)]);
    consider_order(swapped, "swap");
  }
  return best;
}

}  // namespace streamrl::pipeline
