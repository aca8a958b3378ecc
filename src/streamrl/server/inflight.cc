// Engine requests of one HTTP request (see inflight.h).
#include "streamrl/server/inflight.h"

#include <condition_variable>
#include <deque>
#include <mutex>

namespace streamrl::server {
namespace {

// Engine ids are unique across every HTTP request of the process, so an abort never hits another
// client's work.
std::atomic<int64_t> next_engine_id{1};

}  // namespace

struct Inflight::Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Finished> samples;  // guarded by mu
};

Inflight::Inflight(engine::Engine& engine, std::atomic<int64_t>& aborted)
    : engine_(engine), aborted_(aborted), mailbox_(std::make_shared<Mailbox>()) {}

Inflight::~Inflight() {
  for (size_t j = 0; j < engine_ids_.size(); ++j) {
    if (unfinished_[j] > 0) {
      aborted_.fetch_add(1);
      engine_.abort(engine_ids_[j]);
    }
  }
}

void Inflight::submit(const PromptJob& job) {
  engine::Request r;
  r.request_id = next_engine_id.fetch_add(1);
  r.prompt_ids = job.prompt_ids;
  r.n = job.n;
  r.params = job.params;
  r.length_estimate = job.length_estimate;
  // The callback runs on the engine thread and holds the mailbox, not this object, so a sample
  // that finishes after the HTTP request is gone lands harmlessly.
  r.on_sample = [box = mailbox_, job_index = engine_ids_.size()](engine::Sample&& s) {
    {
      std::lock_guard<std::mutex> lock(box->mu);
      box->samples.push_back({job_index, std::move(s)});
    }
    box->cv.notify_one();
  };
  const int64_t id = r.request_id;
  engine_.add_request(std::move(r));
  engine_ids_.push_back(id);
  unfinished_.push_back(job.n);
  remaining_ += job.n;
}

std::optional<Finished> Inflight::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mailbox_->mu);
  if (!mailbox_->cv.wait_for(lock, timeout, [&] { return !mailbox_->samples.empty(); })) {
    return std::nullopt;
  }
  Finished f = std::move(mailbox_->samples.front());
  mailbox_->samples.pop_front();
  unfinished_[f.job] -= 1;
  remaining_ -= 1;
  return f;
}

}  // namespace streamrl::server
