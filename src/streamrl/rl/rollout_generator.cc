#include "streamrl/rl/rollout_generator.h"

#include <chrono>
#include <fstream>
#include <map>

#include "streamrl/core/errors.h"
#include "streamrl/engine/profile.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl::rl {

std::unique_ptr<RolloutGenerator> RolloutGenerator::colocated(model::CausalLM model,
                                                              const engine::EngineConfig& config,
                                                              int64_t weight_version) {
  std::unique_ptr<RolloutGenerator> g(new RolloutGenerator());
  g->engine_ = std::make_unique<engine::Engine>(std::move(model), config, weight_version);
  return g;
}

std::unique_ptr<RolloutGenerator> RolloutGenerator::dedicated(model::CausalLM& model,
                                                              const engine::EngineConfig& config,
                                                              const sgs::SgsConfig& sgs,
                                                              int64_t weight_version) {
  std::unique_ptr<RolloutGenerator> g(new RolloutGenerator());
  g->sgs_ = sgs;
  g->lengths_ = sgs::LengthWindow(sgs.length_window);
  if (sgs.dispatch.policy == sgs::DispatchPolicy::kSkewAware) {
    if (!sgs.profile.empty()) {
      std::ifstream in(sgs.profile);
      if (!in) throw InputError("sgs.profile: cannot open " + sgs.profile);
      g->profile_ = engine::Profile::from_json(nlohmann::json::parse(in, nullptr, false));
    } else {
      g->profile_ = engine::measure_profile(model, engine::ProfileConfig{});
    }
    sgs::RankerConfig rc = sgs.ranker;
    rc.vocab_size = model->config().vocab_size;
    g->ranker_ = std::make_unique<sgs::LengthRanker>(rc);
    g->ranker_trainer_ =
        std::make_unique<sgs::OnlineRankerTrainer>(*g->ranker_, sgs.ranker_window, sgs.refit_every);
  }
  sgs::PoolConfig pc;
  pc.instances = sgs.instances;
  pc.threads_per_instance = sgs.threads_per_instance;
  pc.engine = config;
  pc.devices = sgs.devices;
  pc.dtype = sgs.dtype;
  g->pool_ = std::make_unique<sgs::InstancePool>(model, pc, g->queue_.sink(), weight_version);
  return g;
}

std::unique_ptr<RolloutGenerator> RolloutGenerator::remote(const std::vector<std::string>& urls,
                                                           const dist::RemoteSgsOptions& options,
                                                           model::CausalLM& model,
                                                           int64_t weight_version) {
  std::unique_ptr<RolloutGenerator> g(new RolloutGenerator());
  g->remote_instances_ = static_cast<int>(urls.size());
  g->remote_ = std::make_unique<dist::RemoteSgsPool>(urls, options, g->queue_.sink());
  g->update_weights(weight_version, model);
  return g;
}

RolloutGenerator::~RolloutGenerator() = default;  // the pools stop their threads first

void RolloutGenerator::submit(std::vector<engine::Request> requests) {
  if (remote_) {
    remote_->submit(std::move(requests));
    return;
  }
  if (!pool_) {
    for (auto& r : requests) {
      r.on_sample = [this](engine::Sample&& s) { queue_.push(std::move(s)); };
      engine_->add_request(std::move(r));
    }
    return;
  }
  std::vector<sgs::DispatchItem> items;
  const bool ranked = ranker_ && ranker_fitted_;
  std::vector<double> estimates;
  if (ranked) {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& r : requests) prompts.push_back(r.prompt_ids);
    estimates = ranker_->predict(prompts);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    sgs::DispatchItem item;
    item.estimate = ranked ? estimates[i] : 0.0;
    item.n = requests[i].n;
    item.prompt_len = static_cast<int>(requests[i].prompt_ids.size());
    requests[i].length_estimate = item.estimate;
    items.push_back(item);
  }
  sgs::DispatchConfig dc = sgs_.dispatch;
  // Skew-aware dispatch needs estimates and a length distribution; until the first iteration has
  // produced both it balances load instead.
  if (dc.policy == sgs::DispatchPolicy::kSkewAware && (!ranked || lengths_.size() == 0)) {
    dc.policy = sgs::DispatchPolicy::kLeastLoaded;
  }
  const sgs::Assignment a =
      sgs::dispatch(items, pool_->size(), dc, profile_ ? &*profile_ : nullptr, &lengths_);
  pool_->submit(std::move(requests), a);
}

void RolloutGenerator::observe(const engine::Sample& s) {
  if (!ranker_trainer_) return;
  lengths_.add(static_cast<double>(s.output_ids.size()));
  ranker_trainer_->observe(s.prompt_ids, static_cast<double>(s.output_ids.size()));
}

std::optional<nlohmann::json> RolloutGenerator::end_iteration() {
  if (!ranker_trainer_) return std::nullopt;
  std::optional<sgs::RankerMetrics> m = ranker_trainer_->end_iteration();
  if (!m) return std::nullopt;
  ranker_fitted_ = true;
  return m->to_json();
}

void RolloutGenerator::drive_until_idle() {
  if (dedicated()) throw std::logic_error("drive_until_idle on a dedicated generator");
  engine_->run_until_idle();
}

void RolloutGenerator::update_weights(int64_t version, model::CausalLM& trainer) {
  if (!remote_ && !pool_) {
    engine_->set_weight_version(version);
    return;
  }
  // DSV's predictors and sparse heads travel with the weights, so dedicated engines decode the
  // layers the trainer made sparse as the colocated engine does.
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> named = trainer->named_weights();
  for (auto& [name, t] : model::sparse_attention_weights(trainer)) named.emplace_back(name, t);
  if (remote_) {
    remote_->update_weights(version, named);  // encoded before it returns
    return;
  }
  std::map<std::string, torch::Tensor> weights;
  for (auto& [name, t] : named) weights.emplace(name, t.detach().clone());
  pool_->update_weights(version, weights);
}

void RolloutGenerator::check_alive() {
  if (remote_) remote_->check_alive();
  if (pool_) pool_->wait(std::chrono::milliseconds(0));  // throws when an engine failed
}

int RolloutGenerator::instances() const {
  if (remote_) return remote_instances_;
  return pool_ ? pool_->size() : 1;
}

double RolloutGenerator::busy_seconds() const {
  if (remote_) return remote_->busy_seconds();
  if (!pool_) return engine_->stats().busy_seconds;
  double total = 0;
  for (int i = 0; i < pool_->size(); ++i) total += pool_->stats(i).busy_seconds;
  return total / pool_->size();
}

}  // namespace streamrl::rl
