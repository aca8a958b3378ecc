#include "streamrl/planner/allocation.h"

#include <cmath>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

// Memoised stage cost: the enumeration asks for each device count many times and an emulated
// generation time is expensive.
class Cached {
 public:
  explicit Cached(const StageCost& f) : f_(f) {}
  double operator()(int devices) {
    auto it = memo_.find(devices);
    if (it != memo_.end()) return it->second;
    return memo_[devices] = f_(devices);
  }

 private:
  const StageCost& f_;
  std::map<int, double> memo_;
};

void check_units(int gen_unit, int train_unit) {
  if (gen_unit < 1 || train_unit < 1) throw InputError("allocation units must be >= 1");
}

// The multiple of `unit` in [unit, limit] whose cost is closest to `target`.
int closest(int limit, int unit, Cached& cost, double target) {
  int best = limit;
  double best_gap = std::abs(cost(limit) - target);
  for (int k = unit; k < limit; k += unit) {
    const double gap = std::abs(cost(k) - target);
    if (gap < best_gap) best = k, best_gap = gap;
  }
  return best;
}

}  // namespace

Allocation allocate_single(int n, int gen_unit, int train_unit, const StageCost& p_gen,
                           const StageCost& p_train) {
  check_units(gen_unit, train_unit);
  Cached gen(p_gen), train(p_train);
  Allocation best;
  double best_t = INFINITY;
  for (int x = gen_unit; x + train_unit <= n; x += gen_unit) {
    for (int y = train_unit; x + y <= n; y += train_unit) {
      const double t = std::max(gen(x), train(y));
      if (t < best_t || (t == best_t && x + y < best.gen + best.train)) {
        best_t = t;
        best = {x, y, gen(x), train(y)};
      }
    }
  }
  if (best.gen == 0) {
    throw InputError("no split of " + std::to_string(n) + " devices into generation units of " +
                     std::to_string(gen_unit) + " and training units of " +
                     std::to_string(train_unit));
  }
  return best;
}

Allocation allocate_cross(int m, int n, int gen_unit, int train_unit, const StageCost& p_gen,
                          const StageCost& p_train) {
  check_units(gen_unit, train_unit);
  if (m < gen_unit || n < train_unit) throw InputError("datacenter budget below one unit");
  Cached gen(p_gen), train(p_train);
  const double t_gen = gen(m), t_train = train(n);
  if (t_gen < t_train) {
    const int k = closest(m, gen_unit, gen, t_train);
    return {k, n, gen(k), t_train};
  }
  const int k = closest(n, train_unit, train, t_gen);
  return {m, k, t_gen, train(k)};
}

std::vector<ElasticStep> elastic_schedule(int iterations, int gen, int train, int unit, int max_gen,
                                          const IterationCost& p_gen, const IterationCost& p_train,
                                          double min_gain_fraction) {
  if (unit < 1) throw InputError("elastic unit must be >= 1");
  std::vector<ElasticStep> out;
  for (int i = 0; i < iterations; ++i) {
    ElasticStep s;
    s.iteration = i;
    s.gen = gen;
    s.t_gen = p_gen(i, gen);
    s.t_train = p_train(i, train);
    s.delta = s.t_gen - s.t_train;
    if (gen + unit <= max_gen) {
      const double next = p_gen(i, gen + unit);
      s.gain = s.t_gen - next;
      s.scale_out = s.gain > min_gain_fraction * s.t_gen && s.delta >= s.gain;
      if (s.scale_out) {
        s.delta_after = next - s.t_train;
        gen += unit;
      }
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace streamrl::planner
