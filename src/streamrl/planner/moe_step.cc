#include "streamrl/planner/moe_step.h"

#include <algorithm>
#include <cmath>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

struct LayerCost {
  double attention_s, expert_s, combine_s;  // forward
  int64_t routed_tokens, bytes_per_token, gradient_bytes, expert_gradient_bytes;
};

LayerCost layer_cost(const MoeStepSpec& s) {
  const double h = s.hidden, f = s.ffn, n = s.devices;
  const double flops_per_s = s.accelerator.bf16_tflops * 1e12 * s.mfu;
  const double tokens = static_cast<double>(s.tokens_per_device);
  LayerCost c;
  // Attention projections (4 h^2 weights) and the score and value products over the sequence.
  c.attention_s = tokens * (2 * 4 * h * h + 2 * s.seq * h) / flops_per_s;
  // Balanced routing: each device's experts process as many token copies as it sends out.
  const double routed = tokens * s.top_k;
  c.expert_s = routed * 2 * (2 * h * f) / flops_per_s;
  // Combine: read the expert outputs and weights, write the sum; memory-bound.
  c.combine_s = routed * h * s.bytes_per_activation * 3 / (s.accelerator.hbm_tb_s * 1e12 * 0.8);
  c.routed_tokens = static_cast<int64_t>(routed);
  // A token copy for another device crosses the link; (n - 1) / n of them do.
  c.bytes_per_token = static_cast<int64_t>(std::ceil(h * s.bytes_per_activation * (n - 1) / n));
  // Ring all-reduce moves 2 (n - 1) / n of a buffer through each device's link.
  const auto ring = [](double bytes, double ranks) { return bytes * 2 * (ranks - 1) / ranks; };
  c.gradient_bytes = static_cast<int64_t>(ring((4 * h * h + 2 * h) * s.bytes_per_gradient, n));
  const double replicas = std::max(1.0, n / s.experts);
  const double local = std::max(1.0, static_cast<double>(s.experts) / s.devices);
  c.expert_gradient_bytes =
      static_cast<int64_t>(ring(local * 2 * h * f * s.bytes_per_gradient, replicas));
  return c;
}

}  // namespace

MoeStepSpec MoeStepSpec::from_config(const core::Config& cfg) {
  MoeStepSpec s;
  cfg.get("name", s.name);
  cfg.get("layers", s.layers);
  cfg.get("hidden", s.hidden);
  cfg.get("ffn", s.ffn);
  cfg.get("experts", s.experts);
  cfg.get("top_k", s.top_k);
  cfg.get("seq", s.seq);
  cfg.get("devices", s.devices);
  cfg.get("tokens_per_device", s.tokens_per_device);
  std::string acc = s.accelerator.name;
  cfg.get("accelerator", acc);
  s.accelerator = find_accelerator(acc);
  cfg.get("mfu", s.mfu);
  double gb_s = s.link.bytes_per_s / 1e9, latency_us = s.link.op_latency_s * 1e6;
  cfg.get("link_gb_s", gb_s);
  cfg.get("op_latency_us", latency_us);
  double share = s.link.compute_share;
  cfg.get("compute_share", share);
  s.link = Link{gb_s * 1e9, latency_us * 1e-6, share};
  double chunk_mb = s.all_reduce_chunk_bytes / double(1 << 20);
  cfg.get("all_reduce_chunk_mb", chunk_mb);
  s.all_reduce_chunk_bytes = static_cast<int64_t>(chunk_mb * (1 << 20));
  cfg.get("all_to_all_chunk_tokens", s.all_to_all_chunk_tokens);
  const bool spread = s.devices % s.experts == 0 || s.experts % s.devices == 0;
  if (s.layers < 1 || s.hidden < 1 || s.ffn < 1 || s.experts < 1 || s.top_k < 1 ||
      s.top_k > s.experts || s.devices < 2 || !spread || s.tokens_per_device < 1 || s.mfu <= 0 ||
      s.mfu > 1 || gb_s <= 0 || latency_us < 0 || share < 0 || share > 1 ||
      s.all_reduce_chunk_bytes < 1 || s.all_to_all_chunk_tokens < 1) {
    throw InputError(
        "lina: need layers, hidden, ffn, experts, tokens_per_device, chunk sizes >= 1, 1 <= top_k "
        "<= experts, devices >= 2 a multiple or divisor of experts, 0 < mfu <= 1, link_gb_s > 0, "
        "0 <= compute_share <= 1");
  }
  return s;
}

std::vector<BackwardLayer> moe_backward_layers(const MoeStepSpec& s) {
  const LayerCost c = layer_cost(s);
  BackwardLayer l;
  l.moe = true;
  l.compute_s = 2 * c.attention_s;  // backward: twice the forward's matmuls
  l.gradient_bytes = c.gradient_bytes;
  l.combine_s = c.combine_s;
  l.tokens = c.routed_tokens;
  l.bytes_per_token = c.bytes_per_token;
  l.expert_s = 2 * c.expert_s;
  l.expert_gradient_bytes = c.expert_gradient_bytes;
  return std::vector<BackwardLayer>(s.layers, l);
}

double moe_forward_seconds(const MoeStepSpec& s) {
  const LayerCost c = layer_cost(s);
  const double a2a = s.link.op_latency_s + c.routed_tokens * c.bytes_per_token / s.link.bytes_per_s;
  return s.layers * (c.attention_s + c.expert_s + c.combine_s + 2 * a2a);
}

nlohmann::json project_lina(const MoeStepSpec& s) {
  const std::vector<BackwardLayer> layers = moe_backward_layers(s);
  const double forward = moe_forward_seconds(s);
  nlohmann::json out = {{"model", s.name},
                        {"devices", s.devices},
                        {"experts", s.experts},
                        {"accelerator", s.accelerator.name},
                        {"link_gb_s", s.link.bytes_per_s / 1e9},
                        {"forward_s", forward}};
  const auto run = [&](ep::Policy policy, int64_t chunk_tokens) {
    return simulate_backward(layers, s.link, {policy, s.all_reduce_chunk_bytes, chunk_tokens});
  };
  double step[3] = {}, a2a[3] = {}, blocked[3] = {};
  const ep::Policy policies[] = {ep::Policy::kFairShare, ep::Policy::kPriority,
                                 ep::Policy::kPartitioned};
  for (int i = 0; i < 3; ++i) {
    const LinkSimResult r = run(policies[i], s.all_to_all_chunk_tokens);
    step[i] = forward + r.backward_s;
    a2a[i] = r.all_to_all_s;
    blocked[i] = r.all_to_all_blocked_s;
    nlohmann::json j = to_json(r);
    j["step_s"] = step[i];
    out["policies"][ep::policy_name(policies[i])] = j;
  }
  out["train_speedup"] = step[0] / step[2];
  out["a2a_speedup"] = a2a[0] / a2a[2];
  // Pipelining keeps chunks outstanding while the experts compute: what compute waits is less.
  out["a2a_blocked_speedup"] = blocked[0] / blocked[2];
  out["priority_only_train_speedup"] = step[0] / step[1];
  // Smaller all-to-all chunks pipeline finer but pay a launch each: Lina over fair sharing for
  // chunks of 1/64 to all of a layer's routed tokens.
  const int64_t tokens = layers.empty() ? 1 : layers[0].tokens;
  for (int64_t parts : {64, 32, 16, 8, 4, 1}) {
    const int64_t chunk = std::max<int64_t>(1, tokens / parts);
    const LinkSimResult r = run(ep::Policy::kPartitioned, chunk);
    out["a2a_chunk_sweep"].push_back({{"chunk_tokens", chunk},
                                      {"train_speedup", step[0] / (forward + r.backward_s)},
                                      {"a2a_speedup", a2a[0] / r.all_to_all_s}});
  }
  out["paper"] = {{"train_speedup", {1.37, 1.73}}, {"a2a_speedup", {2.2, 2.4}}};
  return out;
}

}  // namespace streamrl::planner
