// The pipeline profile learnt from the executor's own op timings (SEMU profiles the very ops it
// emulates): per virtual stage and direction, seconds = per_op + per_token * tokens + per_token_sq
// * tokens_sq, fitted by least squares in relative error with every coefficient >= 0. A profile
// from microbenchmarks or FLOPs misses what the step itself does to each op: the other stage
// processes competing for cores and memory bandwidth, padding, the loss on the last stage.
//
// The fit keeps only sums of products, so it is additive: each stage adds the ops it ran, the
// stages all-reduce their sums (sums() / merge()), and every rank refits the same profile and so
// plans the same schedule. Old observations decay by a factor per step, so the fit follows load.
#pragma once

#include <vector>

#include "streamrl/pipeline/micro_batches.h"
#include "streamrl/pipeline/op_costs.h"
#include "streamrl/pipeline/partition.h"
#include "streamrl/planner/pipeline_emulator.h"

namespace streamrl::planner {

class PipelineCostFit {
 public:
  // A fit for the virtual stages of `partition`.
  explicit PipelineCostFit(const pipeline::Partition& partition);

  // One executed op of micro-batch `mb` (its tokens and tokens_sq as the stage computed them,
  // padding included). Ops with non-positive or non-finite seconds are skipped.
  void add(int stage, int chunk, pipeline::OpKind kind, const pipeline::MicroBatch& mb,
           double seconds);
  // Every op of `ops`, whose micro-batch indices point into `micro_batches`.
  void add(const std::vector<pipeline::OpSeconds>& ops,
           const std::vector<pipeline::MicroBatch>& micro_batches);

  // Multiplies every sum by `factor` in [0, 1] (0 forgets all).
  void decay(double factor);
  // The sums, to all-reduce across stages; merge() adds such a vector (InputError on a size
  // mismatch).
  const std::vector<double>& sums() const { return sums_; }
  void merge(const std::vector<double>& sums);

  // Observations (decayed) of a virtual stage's ops in one direction.
  double observations(int stage, int chunk, pipeline::OpKind kind) const;

  // Whether every virtual stage and direction has at least `min_observations` (apply() fits).
  bool fitted(double min_observations = 3) const;

  // Once every virtual stage and direction has at least `min_observations`: `profile` with each
  // virtual stage's layers replaced by its fit, spread evenly over them (activation bytes and
  // link figures kept). Before that, `profile` unchanged: a mix of fitted and prior costs would
  // mix units. InputError when the profile's layer count differs from the partition's.
  PipelineProfile apply(const PipelineProfile& profile, double min_observations = 3) const;

  // What a trainer keeps of the old sums per step (decay(kKeepPerStep) before merging a step's):
  // the fit follows a change of load within a few steps.
  static constexpr double kKeepPerStep = 0.5;

 private:
  // Per (virtual stage, direction): n, then X'WX (6 unique) and X'Wy (3) for x = (1, t, t2),
  // with w = 1 / y^2 (so n is also sum w y^2).
  static constexpr int kSums = 10;
  int slot(int stage, int chunk, pipeline::OpKind kind) const;

  pipeline::Partition partition_;
  std::vector<double> sums_;
};

// Least squares of y ~ c0 + c1 * x1 + c2 * x2 in relative error (each point weighted by 1 / y^2,
// so short ops count as much as long ones), all coefficients >= 0: the best of the 7 subsets of
// terms whose unconstrained solution is non-negative. Zeros when no subset is solvable.
std::vector<double> fit_relative_nonnegative(const std::vector<double>& x1,
                                             const std::vector<double>& x2,
                                             const std::vector<double>& y);

}  // namespace streamrl::planner
