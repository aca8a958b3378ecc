// Checks of the device-generic paths, shared by the CPU suite (device "cpu", run in CI) and the
// GPU-tagged suite (tests/gpu, device "cuda"): the same code, so no path silently assumes the CPU.
#pragma once

#include <torch/torch.h>

#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/model_config.h"
#include "streamrl/rl/optim.h"
#include "streamrl/rl/policy_update.h"

namespace streamrl::testing_util {

inline model::CausalLM device_check_model() {
  return model::CausalLM(model::load_model_config(STREAMRL_TEST_DATA_DIR "/tiny_model.json"), 5);
}

// A copy of `m`'s weights, placed on `device` with weights in `dtype` (autocast: `autocast`).
inline model::CausalLM placed_copy(model::CausalLM& m, const torch::Device& device,
                                   torch::ScalarType dtype, torch::ScalarType autocast) {
  model::CausalLM copy = model::copy_model(m, "test copy");
  copy->place(device, dtype);
  copy->set_autocast(autocast);
  return copy;
}

// Samples from an engine whose model sits on `device` in `engine_dtype`, for 4 prompts x 4.
inline std::vector<engine::Sample> device_samples(model::CausalLM& m, const torch::Device& device,
                                                  torch::ScalarType engine_dtype) {
  model::CausalLM gen = placed_copy(m, device, engine_dtype, torch::kFloat32);
  std::vector<engine::GenerateRequest> reqs;
  for (int r = 0; r < 4; ++r) {
    engine::GenerateRequest q;
    q.request_id = r;
    for (int t = 0; t < 3 + 2 * r; ++t) q.prompt_ids.push_back(4 + (7 * r + 3 * t) % 80);
    q.n = 4;
    q.params.max_new_tokens = 12;
    q.params.temperature = 1.0f;
    q.params.seed = 17;
    reqs.push_back(q);
  }
  return engine::generate_static(gen, reqs);
}

// Max |engine log-prob - trainer log-prob| over every sampled token: the engine on `device` with
// weights in `engine_dtype`, the trainer on `device` with fp32 weights and autocast to
// `train_dtype` (what RL's importance ratios compare).
inline double engine_trainer_logprob_gap(const torch::Device& device,
                                         torch::ScalarType engine_dtype,
                                         torch::ScalarType train_dtype) {
  model::CausalLM m = device_check_model();
  model::CausalLM trainer = placed_copy(m, device, torch::kFloat32, train_dtype);
  torch::NoGradGuard no_grad;
  double gap = 0;
  for (const auto& s : device_samples(m, device, engine_dtype)) {
    std::vector<int64_t> ids(s.prompt_ids.begin(), s.prompt_ids.end());
    ids.insert(ids.end(), s.output_ids.begin(), s.output_ids.end());
    auto t = torch::tensor(ids, torch::kLong).view({1, -1});
    auto lp = trainer->score(t, torch::ones_like(t, torch::kBool)).logprobs[0].cpu();
    for (size_t i = 0; i < s.output_ids.size(); ++i) {
      const double d = lp[s.prompt_ids.size() + i].item<double>() - s.logprobs[i];
      gap = std::max(gap, std::abs(d));
    }
  }
  return gap;
}

// One policy update on fixed samples (generated on the CPU), made on the CPU in fp32 and on
// `device` with autocast to `dtype`: ||delta_device - delta_cpu|| / ||delta_cpu||. Adam's eps = 1
// makes the step ~ lr * g, so this compares gradients rather than their signs.
inline double update_gap_vs_cpu(const torch::Device& device, torch::ScalarType dtype) {
  model::CausalLM m = device_check_model();
  std::vector<rl::ScoredSample> samples;
  int i = 0;
  for (auto& s : device_samples(m, torch::kCPU, torch::kFloat32)) {
    rl::ScoredSample ss;
    ss.sample = std::move(s);
    ss.advantage = (i++ % 4) - 1.5;
    samples.push_back(std::move(ss));
  }
  auto delta = [&](const torch::Device& d, torch::ScalarType dt) {
    model::CausalLM p = placed_copy(m, d, torch::kFloat32, dt);
    rl::OptimConfig oc;
    oc.lr = 1.0;
    oc.eps = 1.0;
    auto opt = rl::make_adamw(*p, oc);
    rl::RlLossConfig loss;
    loss.entropy_coef = 0.01;  // every token has a gradient
    rl::policy_update(p, *opt, samples, loss, rl::UpdateConfig{}, 1.0, 0.0);
    std::vector<torch::Tensor> flat;
    for (auto& [name, t] : p->named_weights()) {
      flat.push_back((t.detach().cpu() - m->named_parameters()[name].detach()).flatten());
    }
    return torch::cat(flat);
  };
  const torch::Tensor on_cpu = delta(torch::kCPU, torch::kFloat32);
  const torch::Tensor on_device = delta(device, dtype);
  return ((on_device - on_cpu).norm() / on_cpu.norm()).item<double>();
}

}  // namespace streamrl::testing_util
