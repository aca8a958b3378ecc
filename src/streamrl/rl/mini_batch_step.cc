#include "streamrl/rl/mini_batch_step.h"

#include <utility>

#include "streamrl/core/errors.h"

namespace streamrl::rl {

std::vector<int> mini_batch_quotas(int groups, int mini_batches) {
  if (mini_batches < 1) throw InputError("train.mini_batches must be >= 1");
  std::vector<int> quotas(mini_batches, groups / mini_batches);
  for (int m = 0; m < groups % mini_batches; ++m) quotas[m] += 1;
  return quotas;
}

MiniBatchStep::MiniBatchStep(std::function<std::unique_ptr<TrainerStep>()> new_step,
                             std::vector<int> quotas, double lr, double grad_clip)
    : new_step_(std::move(new_step)), quotas_(std::move(quotas)), lr_(lr), grad_clip_(grad_clip) {
  if (quotas_.empty()) throw InputError("MiniBatchStep needs at least one mini-batch");
  current_ = new_step_();
}

void MiniBatchStep::step() {
  done_.push_back(current_->finish(lr_, grad_clip_));
  current_ = new_step_();
  index_ += 1;
  groups_ = 0;
}

void MiniBatchStep::add(std::vector<ScoredSample> samples, bool eager) {
  std::vector<ScoredSample> pending;
  for (auto& s : samples) {
    if (s.sample.request_id != last_request_) {
      last_request_ = s.sample.request_id;
      // A new group: the mini-batch in progress is full; the last one takes any surplus.
      while (index_ + 1 < quotas_.size() && groups_ >= quotas_[index_]) {
        current_->add(std::exchange(pending, {}), eager);
        step();
      }
      groups_ += 1;
    }
    pending.push_back(std::move(s));
  }
  current_->add(std::move(pending), eager);
}

UpdateResult MiniBatchStep::finish(double, double) {
  while (index_ + 1 < quotas_.size()) step();
  done_.push_back(current_->finish(lr_, grad_clip_));
  current_.reset();
  return merge_step_results(done_);
}

UpdateResult merge_step_results(const std::vector<UpdateResult>& steps) {
  UpdateResult r;
  for (const auto& s : steps) {
    r.metrics.merge(s.metrics);
    r.grad_norm += s.grad_norm;
    r.micro_batches += s.micro_batches;
    r.tokens += s.tokens;
    r.skipped_samples += s.skipped_samples;
    r.seconds += s.seconds;
    r.cpu_seconds += s.cpu_seconds;
    r.moe.merge(s.moe);
    r.lr = s.lr;
    r.steps += s.steps;
    if (!s.sparse_attention.is_null()) r.sparse_attention = s.sparse_attention;  // the latest
    if (!s.pipeline.is_null()) r.pipeline = s.pipeline;
  }
  // The normalised terms are per step: report their mean, like the gradient norm.
  const double n = static_cast<double>(std::max<size_t>(steps.size(), 1));
  r.grad_norm /= n;
  r.metrics.loss /= n;
  r.metrics.policy_term /= n;
  r.metrics.kl_term /= n;
  r.metrics.entropy_term /= n;
  return r;
}

}  // namespace streamrl::rl
