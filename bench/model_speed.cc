#include "model_speed.h"

#include <algorithm>
#include <chrono>

#include "flops.h"
#include "streamrl/core/roofline.h"
#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/transformer.h"

namespace streamrl::bench {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

nlohmann::json run_model_speed(const BenchOptions& options) {
  core::apply_core_budget(options.threads > 0 ? options.threads : core::available_cores());
  core::Roofline roof = core::measure_roofline();
  const std::string config_path = std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json";
  model::ModelConfig cfg = model::load_model_config(config_path);
  model::CausalLM lm(cfg, /*seed=*/0);
  const int reps = options.quick ? 2 : 5;

  // Training: B sequences of T tokens, forward (log-probs) + backward, no optimizer.
  const int64_t B = 16, T = options.quick ? 64 : 256;
  auto tokens = torch::randint(cfg.vocab_size, {B, T}, torch::kLong);
  auto valid = torch::ones({B, T}, torch::kBool);
  std::vector<double> train_s;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = Clock::now();
    auto out = lm->score(tokens, valid);
    out.logprobs.sum().backward();
    lm->zero_grad();
    if (r > 0) train_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double train_tps = B * T / core::median(train_s);
  const double train_flops = 3 * (forward_flops_per_token(cfg) + attention_flops(cfg, T / 2.0));

  nlohmann::json decode = nlohmann::json::object();
  nlohmann::json decode_frac = nlohmann::json::object();
  torch::NoGradGuard no_grad;
  const int64_t prompt = 32, steps = options.quick ? 16 : 64;
  for (int64_t bs : {1, 8, 64}) {
    model::KVCache cache(cfg, bs, prompt + steps + 1);
    auto slots = torch::arange(bs, torch::kLong);
    auto ptoks = torch::randint(cfg.vocab_size, {bs, prompt}, torch::kLong);
    auto ppos = torch::arange(prompt, torch::kLong).repeat({bs, 1});
    lm->forward_cached(ptoks, ppos, torch::ones({bs, prompt}, torch::kBool), slots, cache);
    auto step_valid = torch::ones({bs, 1}, torch::kBool);
    auto tok = torch::randint(cfg.vocab_size, {bs, 1}, torch::kLong);
    auto t0 = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      auto pos = torch::full({bs, 1}, prompt + s, torch::kLong);
      auto logits = lm->forward_cached(tok, pos, step_valid, slots, cache);
      tok = logits.argmax(-1, /*keepdim=*/true);
    }
    const double tps = bs * steps / std::chrono::duration<double>(Clock::now() - t0).count();
    const double flops = forward_flops_per_token(cfg) + attention_flops(cfg, prompt + steps / 2.0);
    decode[std::to_string(bs)] = tps;
    decode_frac[std::to_string(bs)] = tps * flops / (roof.gemm_gflops * 1e9);
  }
  return {
      {"model", {{"parameters", lm->num_parameters()}, {"config", config_path}}},
      {"threads", core::aten_threads()},
      {"gemm_gflops", roof.gemm_gflops},
      {"train_tokens_per_s", train_tps},
      {"train_roofline_fraction", train_tps * train_flops / (roof.gemm_gflops * 1e9)},
      {"train_batch", {{"B", B}, {"T", T}}},
      {"decode_tokens_per_s", decode},
      {"decode_roofline_fraction", decode_frac},
      {"note", "roofline = fp32 1024^3 GEMM measured in this run; FLOPs count matmuls only"},
  };
}

}  // namespace streamrl::bench
