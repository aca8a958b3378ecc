#include "model_speed.h"

#include <algorithm>
#include <chrono>

#include "flops.h"
#include "rounds.h"
#include "streamrl/core/device.h"
#include "streamrl/core/roofline.h"
#include "streamrl/core/stats.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/fused_linear.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/transformer.h"

namespace streamrl::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds of `fn`, waiting for the device's queued work to finish before reading the clock.
template <class F>
double timed(const torch::Device& device, F&& fn) {
  const auto t0 = Clock::now();
  fn();
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The device's dense matmul rate in `dtype` (the CPU: core::measure_roofline's fp32 GEMM).
double gemm_gflops(const torch::Device& device, torch::ScalarType dtype) {
  if (device.is_cpu()) return core::measure_roofline().gemm_gflops;
  const int64_t n = 8192;
  auto opts = torch::TensorOptions(device).dtype(dtype);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  double best = 1e30;
  for (int r = 0; r < 6; ++r) best = std::min(best, timed(device, [&] { torch::matmul(a, b); }));
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

nlohmann::json run_model_speed(const BenchOptions& options) {
  core::apply_core_budget(options.threads > 0 ? options.threads : core::available_cores());
  const torch::Device device = core::parse_device(options.device, "--device");
  const torch::ScalarType dtype = core::compute_dtype(options.dtype, device, "--dtype");
  const double roof_gflops = gemm_gflops(device, dtype);
  const std::string config_path = std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json";
  model::ModelConfig cfg = model::load_model_config(config_path);
  // Training as the trainer runs it: fp32 master weights, autocast to `dtype` on CUDA.
  model::CausalLM lm(cfg, /*seed=*/0);
  lm->place(device, torch::kFloat32);
  lm->set_autocast(dtype);
  const int reps = options.quick ? 2 : 5;

  // Training: B sequences of T tokens, forward (log-probs) + backward, no optimizer.
  const int64_t B = 16, T = options.quick ? 64 : 256;
  auto tokens = torch::randint(cfg.vocab_size, {B, T}, torch::kLong).to(device);
  auto valid = torch::ones({B, T}, torch::TensorOptions(device).dtype(torch::kBool));
  std::vector<double> train_s;
  for (int r = 0; r < reps + 1; ++r) {
    const double s = timed(device, [&] {
      auto out = lm->score(tokens, valid);
      out.logprobs.sum().backward();
    });
    lm->zero_grad();
    if (r > 0) train_s.push_back(s);
  }
  const double train_tps = B * T / core::median(train_s);
  const double train_flops = 3 * (forward_flops_per_token(cfg) + attention_flops(cfg, T / 2.0));

  // Decoding as an engine runs it: weights in `dtype`, inputs built on the host, one copy of
  // the sampled ids back per step.
  model::CausalLM gen(cfg, /*seed=*/0);
  gen->place(device, dtype);
  nlohmann::json decode = nlohmann::json::object();
  nlohmann::json decode_frac = nlohmann::json::object();
  nlohmann::json packed_gain = nlohmann::json::object();
  torch::NoGradGuard no_grad;
  const int64_t prompt = 32, steps = options.quick ? 16 : 64;
  // On the CPU the inference path's GEMMs run on weights packed once for XNNPACK; the same steps
  // with packing off (OpenBLAS, which packs the weights on every call) interleaved, to show it.
  const bool compare = device.is_cpu() && model::FusedLinear::packs_weights();
  for (int64_t bs : {1, 8, 64}) {
    model::KVCache cache(cfg, bs, prompt + steps + 1, gen->options());
    auto slots = torch::arange(bs, torch::kLong);
    auto ptoks = torch::randint(cfg.vocab_size, {bs, prompt}, torch::kLong);
    auto ppos = torch::arange(prompt, torch::kLong).repeat({bs, 1});
    gen->forward_cached(ptoks, ppos, torch::ones({bs, prompt}, torch::kBool), slots, cache);
    auto step_valid = torch::ones({bs, 1}, torch::kBool);
    auto first = torch::randint(cfg.vocab_size, {bs, 1}, torch::kLong);
    auto run_steps = [&] {
      return timed(device, [&] {
        auto tok = first;
        for (int64_t i = 0; i < steps; ++i) {
          auto pos = torch::full({bs, 1}, prompt + i, torch::kLong);
          auto logits = gen->forward_cached(tok, pos, step_valid, slots, cache);
          tok = logits.argmax(-1, /*keepdim=*/true).cpu();
        }
      });
    };
    Rounds log("model_speed", core::aten_threads());
    for (int r = 0; r < reps; ++r) {
      log.begin_round(r);
      log.add("packed_s", run_steps());
      if (!compare) continue;
      model::FusedLinear::set_packing(false);
      log.add("unpacked_s", run_steps());
      model::FusedLinear::set_packing(true);
    }
    const double tps = bs * steps / log.median("packed_s");
    const double flops = forward_flops_per_token(cfg) + attention_flops(cfg, prompt + steps / 2.0);
    decode[std::to_string(bs)] = tps;
    decode_frac[std::to_string(bs)] = tps * flops / (roof_gflops * 1e9);
    if (compare) packed_gain[std::to_string(bs)] = log.ratio("unpacked_s", "packed_s");
  }
  return {
      {"model", {{"parameters", lm->num_parameters()}, {"config", config_path}}},
      {"device", device.str()},
      {"dtype", std::string(c10::toString(dtype))},
      {"threads", core::aten_threads()},
      {"gemm_gflops", roof_gflops},
      {"train_tokens_per_s", train_tps},
      {"train_roofline_fraction", train_tps * train_flops / (roof_gflops * 1e9)},
      {"train_batch", {{"B", B}, {"T", T}}},
      {"decode_tokens_per_s", decode},
      {"decode_roofline_fraction", decode_frac},
      {"decode_packed_over_unpacked", packed_gain},
      {"note", device.is_cpu()
                   ? "roofline = fp32 1024^3 GEMM measured in this run; FLOPs count matmuls only"
                   : "roofline = 8192^3 GEMM in dtype on the device, measured in this run; FLOPs "
                     "count matmuls only (the tiny model is launch-bound on a GPU)"},
  };
}

}  // namespace streamrl::bench
