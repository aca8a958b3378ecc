// Stage balancing (StreamRL §4.2): Algorithm 1 for one datacenter and across two, and the elastic
// scale-out rule. The stage costs are callables so that tests can use hand-made curves and the
// planner can plug in emulated generation times.
#pragma once

#include <functional>
#include <vector>

namespace streamrl::planner {

// Seconds of one stage's work for an iteration on `devices` devices.
using StageCost = std::function<double(int devices)>;

struct Allocation {
  int gen = 0, train = 0;  // devices of the SGS and of the trainer
  double t_gen = 0, t_train = 0;
  double iteration_seconds() const { return t_gen > t_train ? t_gen : t_train; }
};

// Single datacenter, budget n: the (x, y) with x + y <= n, x a multiple of gen_unit and y of
// train_unit, that minimises max(P_gen(x), P_train(y)); among equal times the fewest devices.
// InputError when no split fits.
Allocation allocate_single(int n, int gen_unit, int train_unit, const StageCost& p_gen,
                           const StageCost& p_train);

// Cross datacenter with fixed budgets (m generation devices, n training devices): the faster side
// is shrunk to the unit multiple whose time is closest to the slower side's, freeing the rest.
Allocation allocate_cross(int m, int n, int gen_unit, int train_unit, const StageCost& p_gen,
                          const StageCost& p_train);

// Costs that change with the iteration (output lengths grow during RL).
using IterationCost = std::function<double(int iteration, int devices)>;

struct ElasticStep {
  int iteration = 0;
  int gen = 0;  // SGS devices during this iteration
  double t_gen = 0, t_train = 0;
  double delta = 0;        // T_gen - T_train
  double gain = 0;         // Delta' = P_gen(gen) - P_gen(gen + unit)
  bool scale_out = false;  // delta >= gain: one more unit from the next iteration
  double delta_after = 0;  // P_gen(gen + unit) - T_train when scaling out
};

// The elastic rule iterated over `iterations`: the trainer keeps `train` devices; the SGS starts
// with `gen` and grows by `unit` (up to `max_gen`) whenever T_gen - T_train >= the unit's gain
// Delta'. A unit whose gain is below `min_gain_fraction` x T_gen is not worth a node (when the
// long tail bounds generation, more instances barely help), so it is never added.
std::vector<ElasticStep> elastic_schedule(int iterations, int gen, int train, int unit, int max_gen,
                                          const IterationCost& p_gen, const IterationCost& p_train,
                                          double min_gain_fraction = 0);

}  // namespace streamrl::planner
