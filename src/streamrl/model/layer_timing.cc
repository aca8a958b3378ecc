#include "streamrl/model/layer_timing.h"

#include <algorithm>
#include <chrono>

#include "streamrl/core/device.h"
#include "streamrl/core/errors.h"

namespace streamrl::model {
namespace {

double least(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

LayerSeconds time_layers(CausalLM& model, int64_t rows, int64_t row_tokens, int repeats) {
  if (rows < 1 || row_tokens < 1 || repeats < 1) {
    throw InputError("time_layers: rows, row_tokens and repeats must be >= 1");
  }
  const ModelConfig& c = model->config();
  const int layers = static_cast<int>(c.num_hidden_layers);
  const torch::Device device = model->device();
  // Deterministic tokens: timing must not move the generator's random stream.
  const torch::Tensor tokens = torch::arange(rows * row_tokens, torch::kLong)
                                   .remainder(c.vocab_size)
                                   .view({rows, row_tokens});
  const torch::Tensor valid = torch::ones({rows, row_tokens}, torch::kBool);
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  std::vector<std::vector<double>> forward(static_cast<size_t>(layers)),
      backward(static_cast<size_t>(layers));
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Each layer's repeats back to back after one untimed run, as training repeats the same shapes:
  // a first run pays for fresh memory (page faults on the logits, several times the rest).
  for (int l = 0; l < layers; ++l) {
    for (int r = -1; r < repeats; ++r) {
      std::vector<torch::Tensor> inputs = params;
      torch::Tensor input;
      if (l > 0) {
        input = torch::full({rows, row_tokens, c.hidden_size}, 0.02, model->options())
                    .requires_grad_(true);
        inputs.push_back(input);
      }
      core::synchronize(device);
      auto t = std::chrono::steady_clock::now();
      const StageOutput out = model->score_layers(tokens, valid, input, l, l + 1);
      core::synchronize(device);
      const double forward_s = since(t);
      const torch::Tensor y = l == layers - 1 ? out.score.logprobs.sum() : out.hidden.sum();
      double backward_s = 0;  // 0 with every weight frozen: no backward to time
      if (y.requires_grad()) {
        core::synchronize(device);
        t = std::chrono::steady_clock::now();
        // Gradients returned rather than accumulated: the parameters' .grad stays untouched.
        torch::autograd::grad({y}, inputs, {}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
        core::synchronize(device);
        backward_s = since(t);
      }
      if (r < 0) continue;
      forward[static_cast<size_t>(l)].push_back(forward_s);
      backward[static_cast<size_t>(l)].push_back(backward_s);
    }
  }
  LayerSeconds s;
  for (int l = 0; l < layers; ++l) {
    s.forward.push_back(least(forward[static_cast<size_t>(l)]));
    s.backward.push_back(least(backward[static_cast<size_t>(l)]));
  }
  return s;
}

}  // namespace streamrl::model
