// Several optimizer steps per iteration (verl's ppo_mini_batch_size, OpenRLHF's
// micro_train_batch_size): the iteration's groups, in the order they complete, are split into
// mini-batches and each gets its own step, so one batch of rollouts moves the policy several
// times. PPO's clipped ratio against the generating policy keeps the later steps, which train on
// samples from weights a step or more older, in check.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "streamrl/rl/policy_update.h"

namespace streamrl::rl {

// Splits `groups` into `mini_batches` sizes as equal as the count allows (larger ones first).
std::vector<int> mini_batch_quotas(int groups, int mini_batches);

// One iteration's optimizer steps: mini-batch m takes the next quotas[m] complete groups (a group
// is a run of samples with one request id) and steps as soon as they are added, at the learning
// rate and clip given at construction: every step of the iteration uses those, so finish()'s own
// arguments are not used. finish() steps on what is left and, so that every trainer rank takes
// as many collective steps, runs the steps whose groups never came (dynamic sampling out of
// refills) on no samples: those leave the weights unchanged.
class MiniBatchStep : public TrainerStep {
 public:
  MiniBatchStep(std::function<std::unique_ptr<TrainerStep>()> new_step, std::vector<int> quotas,
                double lr, double grad_clip);

  void add(std::vector<ScoredSample> samples, bool eager) override;
  // Returns the steps' results merged: sums of tokens, times and loss statistics, the mean loss
  // and gradient norm per step, `steps` the number of optimizer steps.
  UpdateResult finish(double lr, double grad_clip) override;

 private:
  void step();  // finishes the current mini-batch's step and starts the next one's

  std::function<std::unique_ptr<TrainerStep>()> new_step_;
  std::vector<int> quotas_;
  double lr_, grad_clip_;
  std::unique_ptr<TrainerStep> current_;
  size_t index_ = 0;  // mini-batch in progress
  int groups_ = 0;    // groups added to it
  int64_t last_request_ = -1;
  std::vector<UpdateResult> done_;
};

// Merges the results of one iteration's optimizer steps (see MiniBatchStep::finish).
UpdateResult merge_step_results(const std::vector<UpdateResult>& steps);

}  // namespace streamrl::rl
