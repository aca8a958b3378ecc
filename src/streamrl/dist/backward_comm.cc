#include "streamrl/dist/backward_comm.h"

#include <algorithm>
#include <string>

#include "streamrl/core/clock.h"
#include "streamrl/core/errors.h"
#include "streamrl/dist/process_group.h"

namespace streamrl::dist {

using core::Clock;

BackwardComm::BackwardComm(ProcessGroup& group, std::vector<torch::Tensor> parameters,
                           ep::SchedulerOptions options, std::chrono::milliseconds timeout)
    : group_(group), parameters_(std::move(parameters)), options_(options), timeout_(timeout) {
  // Chunks are cut at byte offsets: keep them whole elements of any float type.
  options_.all_reduce_chunk_bytes = std::max<int64_t>(8, options_.all_reduce_chunk_bytes / 8 * 8);
  sums_.resize(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    hooks_.push_back(
        parameters_[i].register_hook([this, i](const torch::Tensor& g) { on_gradient(i, g); }));
  }
  thread_ = std::thread([this] { run(); });
}

BackwardComm::~BackwardComm() {
  if (on_close_) on_close_();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
}

void BackwardComm::begin(ep::Policy policy, bool defer) {
  std::lock_guard<std::mutex> lk(mu_);
  if (error_) std::rethrow_exception(error_);
  if (armed_ || !scheduler_.idle()) throw RuntimeFailure("backward comm: begin() before finish()");
  ep::SchedulerOptions o = options_;
  o.policy = policy;
  scheduler_ = ep::CommScheduler(o);
  std::fill(sums_.begin(), sums_.end(), torch::Tensor());
  next_submit_ = 0;
  stats_ = {};
  defer_ = defer;
  armed_ = true;
}

void BackwardComm::on_gradient(size_t index, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!armed_) return;
  // The hook sees this backward's gradient before it is accumulated: add earlier micro-batches'.
  torch::NoGradGuard no_grad;
  const torch::Tensor& acc = parameters_[index].grad();
  sums_[index] = acc.defined() ? grad + acc : grad.clone();
  pump_locked();
}

void BackwardComm::pump_locked() {
  const size_t n = sums_.size();
  while (next_submit_ < n && (!defer_ || finishing_) && sums_[n - 1 - next_submit_].defined()) {
    const torch::Tensor& t = sums_[n - 1 - next_submit_];
    scheduler_.submit_all_reduce(static_cast<int>(n - 1 - next_submit_),
                                 t.numel() * static_cast<int64_t>(t.element_size()));
    ++next_submit_;
  }
  for (const ep::MicroOp& op : scheduler_.launch()) {
    if (op.kind == ep::OpKind::kAllReduce) {
      to_reduce_.push_back(op);
    } else {
      a2a_granted_ = true;
      a2a_op_ = op;
    }
  }
  cv_.notify_all();
}

void BackwardComm::combine_begins() {
  std::lock_guard<std::mutex> lk(mu_);
  scheduler_.set_combine_running(true);
}

void BackwardComm::all_to_all_begins(int64_t bytes) {
  std::unique_lock<std::mutex> lk(mu_);
  if (error_) std::rethrow_exception(error_);
  a2a_start_ = Clock::now();
  stats_.all_to_all_bytes += bytes;
  scheduler_.set_combine_running(false);
  // The exchange runs whole on the backward thread: one micro-op for the scheduler.
  scheduler_.submit_all_to_all(stats_.all_to_all_ops, 1, std::max<int64_t>(1, bytes));
  pump_locked();
  if (!cv_.wait_for(lk, timeout_, [&] { return a2a_granted_ || error_; })) {
    throw TimeoutError("backward comm: an all-to-all waited past the timeout for its launch");
  }
  if (error_) std::rethrow_exception(error_);
  a2a_granted_ = false;
}

void BackwardComm::all_to_all_ends() {
  std::lock_guard<std::mutex> lk(mu_);
  scheduler_.completed(a2a_op_);
  stats_.all_to_all_s += core::seconds_since(a2a_start_);
  ++stats_.all_to_all_ops;
  pump_locked();
}

BackwardCommStats BackwardComm::finish() {
  std::unique_lock<std::mutex> lk(mu_);
  if (!armed_) throw RuntimeFailure("backward comm: finish() without begin()");
  // A parameter that got no gradient on this rank still takes its turn, as zeros, so every
  // rank launches the same sequence of collectives.
  for (size_t i = 0; i < sums_.size(); ++i) {
    if (!sums_[i].defined()) sums_[i] = torch::zeros_like(parameters_[i]);
  }
  const auto start = Clock::now();
  finishing_ = true;
  pump_locked();
  if (!cv_.wait_for(lk, timeout_, [&] { return error_ || scheduler_.idle(); })) {
    throw TimeoutError("backward comm: gradients not all-reduced within " +
                       std::to_string(timeout_.count() / 1000.0) + " s");
  }
  finishing_ = false;
  if (error_) std::rethrow_exception(error_);
  stats_.finish_wait_s = core::seconds_since(start);
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].mutable_grad() = sums_[i];
  std::fill(sums_.begin(), sums_.end(), torch::Tensor());
  armed_ = false;
  return stats_;
}

void BackwardComm::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !to_reduce_.empty(); });
    if (stop_) return;
    const ep::MicroOp op = to_reduce_.front();
    to_reduce_.erase(to_reduce_.begin());
    const torch::Tensor t = sums_[op.tensor];
    lk.unlock();
    try {
      const int64_t es = t.element_size();
      std::vector<torch::Tensor> part = {t.view({-1}).narrow(0, op.offset / es, op.bytes / es)};
      group_.all_reduce_sum(part);
    } catch (...) {
      lk.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    lk.lock();
    scheduler_.completed(op);
    ++stats_.all_reduce_ops;
    pump_locked();
  }
}

}  // namespace streamrl::dist
