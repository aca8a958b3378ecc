#include "streamrl/sgs/sgs_config.h"

#include "streamrl/core/device.h"

#include <stdexcept>
#include <string>

namespace streamrl::sgs {

SgsConfig SgsConfig::read(const core::Config& s, SgsConfig c) {
  s.get("instances", c.instances);
  s.get("threads_per_instance", c.threads_per_instance);
  std::string policy = to_string(c.dispatch.policy), objective = "max", admission = "default";
  std::string alpha = c.dispatch.auto_alpha ? "auto" : std::to_string(c.dispatch.alpha);
  std::string model = c.dispatch.latency_model == LatencyModel::kEq2 ? "eq2" : "replay";
  s.get("dispatch", policy);
  s.get("alpha", alpha);
  s.get("latency_model", model);
  s.get("objective", objective);
  s.get("admission", admission);
  s.get("max_batch_size", c.dispatch.max_batch_size);
  s.get("seed", c.dispatch.seed);
  s.get("length_window", c.length_window);
  s.get("profile", c.profile);
  s.get("devices", c.devices);
  c.dispatch.policy = parse_dispatch_policy(policy);
  c.dispatch.objective = parse_split_objective(objective);
  c.dispatch.latency_model = parse_latency_model(model);
  if (admission != "default") c.dispatch.admission = engine::parse_admission_policy(admission);
  const std::string where = s.prefix().empty() ? "" : s.prefix() + ".";
  for (const auto& d : c.devices) core::parse_device(d, where + "devices");
  if (c.instances < 1 || c.threads_per_instance < 1 || c.dispatch.max_batch_size < 1 ||
      c.length_window < 1) {
    throw InputError(where +
                     "instances, threads_per_instance, max_batch_size and length_window "
                     "must be >= 1");
  }
  c.dispatch.auto_alpha = alpha == "auto";
  if (!c.dispatch.auto_alpha) {
    size_t used = 0;
    try {
      c.dispatch.alpha = std::stod(alpha, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != alpha.size() || !(c.dispatch.alpha >= 0 && c.dispatch.alpha <= 1)) {
      throw InputError(where + "alpha must be auto or a number in [0, 1], not '" + alpha + "'");
    }
  } else if (c.dispatch.latency_model != LatencyModel::kReplay) {
    throw InputError(where + "alpha: auto needs latency_model: replay (eq2 takes a fixed alpha)");
  }
  core::Config r = s.section("ranker");
  r.get("hidden_size", c.ranker.hidden_size);
  r.get("layers", c.ranker.layers);
  r.get("heads", c.ranker.heads);
  r.get("max_prompt_tokens", c.ranker.max_prompt_tokens);
  r.get("steps", c.ranker.steps);
  r.get("batch_size", c.ranker.batch_size);
  r.get("lr", c.ranker.lr);
  r.get("seed", c.ranker.seed);
  r.get("window", c.ranker_window);
  r.get("refit_every", c.refit_every);
  if (c.ranker.hidden_size < 1 || c.ranker.layers < 1 || c.ranker.heads < 1 ||
      c.ranker.hidden_size % c.ranker.heads != 0 || c.ranker.steps < 0 || c.ranker.batch_size < 1 ||
      !(c.ranker.lr > 0) || c.ranker_window < 1 || c.refit_every < 1) {
    throw InputError(where +
                     "ranker: sizes >= 1 (hidden_size divisible by heads), steps >= 0, "
                     "lr > 0, window and refit_every >= 1");
  }
  return c;
}

}  // namespace streamrl::sgs
