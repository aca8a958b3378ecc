#include "streamrl/engine/profile.h"
#include "streamrl/core/stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/engine.h"
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
  for (int ctx : config.contexts) {
    if (ctx < 1 || ctx + config.steps + 2 > mc.max_position_embeddings) continue;
    for (int bs : config.batch_sizes) {
      // Real engine steps, so the profile holds what a step costs beyond the forward: inputs,
      // sampling, the host copy, per-sample bookkeeping. `bs` requests of a `ctx`-token prompt;
      // the first step admits and prefills them, each later one decodes at one more token of
      // context. Cache contents do not change the cost, so prompts are arbitrary tokens.
      EngineConfig ec;
      ec.max_batch_size = bs;
      ec.max_seq_len = ctx + config.steps + 2;
      Engine engine(model, ec);
      for (int i = 0; i < bs; ++i) {
        Request r;
        r.request_id = i;
        r.prompt_ids.assign(ctx, static_cast<int32_t>(i % mc.vocab_size));
        r.params.max_new_tokens = config.steps + 2;
        r.params.seed = static_cast<uint64_t>(i);
        engine.add_request(std::move(r));
      }
      engine.step();  // admission and prefill
      std::vector<double> times;
      for (int s = 0; s < config.steps; ++s) {
        const auto t0 = Clock::now();
        engine.step();
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
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
