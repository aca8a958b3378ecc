#include "streamrl/planner/pipeline_plan_ahead.h"

#include <algorithm>
#include <string>
#include <utility>

#include "streamrl/core/errors.h"

namespace streamrl::planner {

PipelinePlanAhead::PipelinePlanAhead(PipelineProfile profile, pipeline::Partition partition,
                                     PipelinePlanOptions options, PlanAheadOptions ahead)
    : profile_(std::move(profile)),
      partition_(std::move(partition)),
      options_(options),
      ahead_(ahead),
      thread_([this] { worker(); }) {}

PipelinePlanAhead::~PipelinePlanAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void PipelinePlanAhead::submit(int64_t batch_id, std::vector<int64_t> lengths,
                               std::optional<PipelinePlanOptions> options,
                               std::optional<PipelineProfile> profile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.count(batch_id)) {
      throw InputError("plan ahead: batch " + std::to_string(batch_id) +
                       " is already submitted and not taken");
    }
    Entry& e = entries_[batch_id];
    e.lengths = std::move(lengths);
    e.options = options ? *options : options_;
    e.profile = std::move(profile);
    queue_.push_back(batch_id);
    submitted_.push_back(batch_id);
  }
  work_cv_.notify_one();
}

void PipelinePlanAhead::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const int64_t id = queue_.front();
    queue_.pop_front();
    // std::map nodes are stable, and an entry is erased only once done, so this stays valid.
    Entry& e = entries_.at(id);
    const std::vector<int64_t> lengths = e.lengths;
    const PipelinePlanOptions options = e.options;
    const std::optional<PipelineProfile> profile = std::move(e.profile);
    lock.unlock();
    const Clock::time_point start = Clock::now();
    PipelinePlan plan;
    std::exception_ptr error;
    try {
      plan = plan_pipeline(lengths, profile ? *profile : profile_, partition_, options, emulator_);
    } catch (...) {
      error = std::current_exception();
    }
    const Clock::time_point end = Clock::now();
    lock.lock();
    e.plan = std::move(plan), e.error = error;
    e.start = start, e.end = end, e.done = true;
    done_cv_.notify_all();
  }
}

PipelinePlan PipelinePlanAhead::take(int64_t batch_id, double timeout_s) {
  const Clock::time_point called = Clock::now();
  if (timeout_s < 0) timeout_s = ahead_.take_timeout_s;
  timeout_s = std::min(timeout_s, 1e7);  // keeps the deadline representable
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(batch_id);
  if (it == entries_.end()) {
    throw InputError("plan ahead: batch " + std::to_string(batch_id) +
                     " was never submitted (or is already taken)");
  }
  const auto deadline = called + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  // `it` stays valid while waiting: only take() erases, and only a done entry.
  if (!done_cv_.wait_until(lock, deadline, [&] { return it->second.done; })) {
    throw TimeoutError("plan ahead: batch " + std::to_string(batch_id) + " not planned within " +
                       std::to_string(timeout_s) + " s (plan_ahead take timeout)");
  }
  const Clock::time_point returned = Clock::now();
  Entry e = std::move(it->second);
  entries_.erase(it);
  submitted_.erase(std::find(submitted_.begin(), submitted_.end(), batch_id));
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  PlanAheadTiming t;
  t.planning_s = seconds(e.end - e.start);
  t.hidden_s = std::clamp(seconds(std::min(e.end, called) - e.start), 0.0, t.planning_s);
  t.blocked_s = seconds(returned - called);
  timings_[batch_id] = t;
  if (e.error) std::rethrow_exception(e.error);
  return std::move(e.plan);
}

std::optional<PipelinePlan> PipelinePlanAhead::take_matching(const std::vector<int64_t>& lengths,
                                                             int64_t* batch_id, double timeout_s) {
  std::vector<int64_t> earlier;
  std::optional<int64_t> match;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t id : submitted_) {
      if (entries_.at(id).lengths == lengths) {
        match = id;
        break;
      }
      earlier.push_back(id);
    }
  }
  if (!match) return std::nullopt;
  for (int64_t id : earlier) {
    try {
      take(id, timeout_s);
    } catch (const std::exception&) {  // a batch that will not run: its error does not matter
    }
  }
  if (batch_id) *batch_id = *match;
  return take(*match, timeout_s);
}

std::optional<PlanAheadTiming> PipelinePlanAhead::timing(int64_t batch_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = timings_.find(batch_id);
  if (it == timings_.end()) return std::nullopt;
  return it->second;
}

size_t PipelinePlanAhead::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace streamrl::planner
