#include "streamrl/sgs/sample_stream.h"

namespace streamrl::sgs {

void SampleQueue::push(engine::Sample&& sample) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back(std::move(sample));
  }
  cv_.notify_one();
}

std::optional<engine::Sample> SampleQueue::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !samples_.empty(); })) return std::nullopt;
  engine::Sample s = std::move(samples_.front());
  samples_.pop_front();
  return s;
}

std::vector<engine::Sample> SampleQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<engine::Sample> out(std::make_move_iterator(samples_.begin()),
                                  std::make_move_iterator(samples_.end()));
  samples_.clear();
  return out;
}

size_t SampleQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_.size();
}

SampleSink SampleQueue::sink() {
  return [this](engine::Sample&& s) { push(std::move(s)); };
}

}  // namespace streamrl::sgs
