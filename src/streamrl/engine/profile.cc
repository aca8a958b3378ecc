#include "streamrl/engine/profile.h"
#include "streamrl/core/stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/model/kv_cache.h"

namespace streamrl::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Profile measure_profile(model::CausalLM& model, const ProfileConfig& config) {
  torch::NoGradGuard no_grad;
  Profile p;
  p.threads = core::aten_threads();
  const auto& mc = model->config();
  SamplingParams params;
  for (int ctx : config.contexts) {
    if (ctx + config.steps + 1 > mc.max_position_embeddings) continue;
    for (int bs : config.batch_sizes) {
      // Cache contents do not change the cost of attention, so the cache is left as zeros and
      // only the positions say how much context each step attends to.
      model::KVCache cache(mc, bs, ctx + config.steps + 1, model->options());
      auto slots = torch::arange(bs, torch::kLong);
      auto tokens = torch::randint(mc.vocab_size, {bs, 1}, torch::kLong);
      auto valid = torch::ones({bs, 1}, torch::kBool);
      std::vector<const SamplingParams*> ps(bs, &params);
      std::vector<double> u(bs, 0.5);
      std::vector<double> times;
      for (int s = 0; s <= config.steps; ++s) {
        auto t0 = Clock::now();
        auto logits = model->forward_cached(tokens, torch::full({bs, 1}, ctx + s, torch::kLong),
                                            valid, slots, cache);
        // One copy to the host per step, as the engine does (it also ends the step's timing).
        tokens = sample_tokens(logits, ps, u).tokens.cpu().view({bs, 1});
        if (s > 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      p.ptl.push_back({bs, ctx, core::median(times)});
    }
  }
  const int pb = config.prefill_batch;
  const int pl = std::min<int>(config.prefill_len, mc.max_position_embeddings);
  model::KVCache cache(mc, pb, pl, model->options());
  auto tokens = torch::randint(mc.vocab_size, {pb, pl}, torch::kLong);
  auto pos = torch::arange(pl, torch::kLong).repeat({pb, 1});
  auto valid = torch::ones({pb, pl}, torch::kBool);
  std::vector<double> times;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    model->forward_cached(tokens, pos, valid, torch::arange(pb, torch::kLong), cache)
        .sum()
        .item<float>();  // waits for the device
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  p.prefill_tokens_per_s = pb * pl / core::median(times);
  return p;
}

core::PtlTable Profile::table() const {
  std::vector<core::PtlTable::Point> points;
  for (const auto& pt : ptl) points.push_back({pt.batch_size, pt.context, pt.step_seconds});
  return core::PtlTable::from_points(points, prefill_tokens_per_s, threads);
}

double Profile::step_seconds(double batch_size, int context) const {
  if (ptl.empty()) throw InputError("profile has no PTL points");
  return table().step_seconds(batch_size, context);
}

nlohmann::json Profile::to_json() const {
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& pt : ptl) {
    pts.push_back({{"batch_size", pt.batch_size},
                   {"context", pt.context},
                   {"step_seconds", pt.step_seconds},
                   {"tokens_per_s", pt.tokens_per_s()}});
  }
  return {{"ptl", pts}, {"prefill_tokens_per_s", prefill_tokens_per_s}, {"threads", threads}};
}

Profile Profile::from_json(const nlohmann::json& j) {
  Profile p;
  try {
    for (const auto& pt : j.at("ptl")) {
      p.ptl.push_back({pt.at("batch_size").get<int>(), pt.at("context").get<int>(),
                       pt.at("step_seconds").get<double>()});
      if (!(p.ptl.back().step_seconds > 0)) throw InputError("step_seconds must be positive");
    }
    p.prefill_tokens_per_s = j.value("prefill_tokens_per_s", 0.0);
    p.threads = j.value("threads", 0);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("malformed profile: ") + e.what());
  }
  if (p.ptl.empty()) throw InputError("malformed profile: no PTL points");
  return p;
}

}  // namespace streamrl::engine
