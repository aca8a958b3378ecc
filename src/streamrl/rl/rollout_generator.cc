#include "streamrl/rl/rollout_generator.h"

#include <map>

#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"

namespace streamrl::rl {

void SampleQueue::push(engine::Sample sample) {
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

RolloutGenerator::RolloutGenerator(model::CausalLM model, const engine::EngineConfig& config,
                                   int64_t weight_version)
    : engine_(std::make_unique<engine::Engine>(std::move(model), config, weight_version)) {}

RolloutGenerator::~RolloutGenerator() {
  if (thread_) thread_->stop();  // before the engine it drives goes away
}

std::unique_ptr<RolloutGenerator> RolloutGenerator::colocated(model::CausalLM model,
                                                              const engine::EngineConfig& config,
                                                              int64_t weight_version) {
  return std::unique_ptr<RolloutGenerator>(
      new RolloutGenerator(std::move(model), config, weight_version));
}

std::unique_ptr<RolloutGenerator> RolloutGenerator::dedicated(model::CausalLM model,
                                                              const engine::EngineConfig& config,
                                                              int64_t weight_version, int threads) {
  std::unique_ptr<RolloutGenerator> g(
      new RolloutGenerator(std::move(model), config, weight_version));
  g->thread_ = std::make_unique<engine::EngineThread>(
      *g->engine_, [threads] { core::apply_core_budget(threads); });
  return g;
}

void RolloutGenerator::submit(engine::Request request) {
  request.on_sample = [this](engine::Sample&& s) { queue_.push(std::move(s)); };
  engine_->add_request(std::move(request));
}

void RolloutGenerator::drive_until_idle() {
  if (thread_) throw std::logic_error("drive_until_idle on a dedicated generator");
  engine_->run_until_idle();
}

void RolloutGenerator::update_weights(int64_t version, model::CausalLM& trainer) {
  if (!thread_) throw std::logic_error("update_weights on a colocated generator");
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> weights;
  for (auto& [name, t] : trainer->named_weights()) weights.emplace(name, t.detach().clone());
  engine_->update_weights(version, std::move(weights));
}

void RolloutGenerator::set_weight_version(int64_t version) {
  if (thread_) throw std::logic_error("set_weight_version on a dedicated generator");
  engine_->set_weight_version(version);
}

void RolloutGenerator::check_alive() const {
  if (thread_ && !thread_->error().empty()) {
    throw RuntimeFailure("generation engine failed: " + thread_->error());
  }
}

}  // namespace streamrl::rl
