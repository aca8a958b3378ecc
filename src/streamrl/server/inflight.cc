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

// FNV-1a over the token ids: the random key of a prompt, so a request's samples depend on its
// seed, prompt and sample index alone, not on what the server ran before.
uint64_t prompt_key(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : ids) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace

struct Inflight::Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<InflightEvent> events;  // guarded by mu
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

void Inflight::submit(const PromptJob& job, bool tokens) {
  engine::Request r;
  r.request_id = next_engine_id.fetch_add(1);
  r.prompt_ids = job.prompt_ids;
  r.n = job.n;
  r.params = job.params;
  r.length_estimate = job.length_estimate;
  job.turn_hooks.attach(r);
  r.random_key = prompt_key(job.prompt_ids);
  // The callback runs on the engine thread and holds the mailbox, not this object, so a sample
  // that finishes after the HTTP request is gone lands harmlessly.
  const size_t job_index = engine_ids_.size();
  r.on_sample = [box = mailbox_, job_index](engine::Sample&& s) {
    InflightEvent e;
    e.job = job_index;
    e.sample_index = s.sample_index;
    e.sample = std::move(s);
    {
      std::lock_guard<std::mutex> lock(box->mu);
      box->events.push_back(std::move(e));
    }
    box->cv.notify_one();
  };
  if (tokens) {
    r.on_token = [box = mailbox_, job_index](const engine::TokenEvent& t) {
      InflightEvent e;
      e.job = job_index;
      e.sample_index = t.sample_index;
      e.token = t.token;
      e.logprob = t.logprob;
      if (t.top) e.top = *t.top;
      {
        std::lock_guard<std::mutex> lock(box->mu);
        box->events.push_back(std::move(e));
      }
      box->cv.notify_one();
    };
  }
  const int64_t id = r.request_id;
  engine_.add_request(std::move(r));
  engine_ids_.push_back(id);
  unfinished_.push_back(job.n);
  remaining_ += job.n;
}

std::optional<InflightEvent> Inflight::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mailbox_->mu);
  if (!mailbox_->cv.wait_for(lock, timeout, [&] { return !mailbox_->events.empty(); })) {
    return std::nullopt;
  }
  InflightEvent e = std::move(mailbox_->events.front());
  mailbox_->events.pop_front();
  if (e.sample) {
    unfinished_[e.job] -= 1;
    remaining_ -= 1;
  }
  return e;
}

void Inflight::stop(size_t job, int32_t sample_index) {
  engine_.stop_sample(engine_ids_.at(job), sample_index);
}

}  // namespace streamrl::server
