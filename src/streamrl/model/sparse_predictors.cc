#include "streamrl/model/sparse_predictors.h"

#include "streamrl/core/errors.h"

namespace streamrl::model {

PredictorFit fit_sparse_predictors(CausalLM& lm, const std::vector<torch::Tensor>& sequences,
                                   const PredictorFitConfig& config) {
  if (!lm->sparse_attention()) {
    throw InputError("fit_sparse_predictors: the model has no sparse attention enabled");
  }
  if (sequences.empty()) throw InputError("fit_sparse_predictors: no sequences");
  const ModelConfig& c = lm->config();
  const int64_t G = c.num_attention_heads / c.num_key_value_heads;
  // The model is frozen: each sequence's attention inputs are captured once, as [H, T, .] per
  // layer (keys repeated over the query heads that share them).
  struct LayerInputs {
    torch::Tensor x, q, k;
  };
  std::vector<std::vector<LayerInputs>> inputs;
  for (const auto& seq : sequences) {
    if (seq.dim() != 1 || seq.size(0) < 2) {
      throw InputError("fit_sparse_predictors: every sequence must be [T] tokens with T >= 2");
    }
    std::vector<LayerInputs> layers;
    for (const AttentionCapture& a : lm->capture_attention(seq.view({1, -1}))) {
      layers.push_back({a.x[0].to(torch::kFloat32), a.q[0].transpose(0, 1).to(torch::kFloat32),
                        a.k[0].transpose(0, 1).repeat_interleave(G, 0).to(torch::kFloat32)});
    }
    inputs.push_back(std::move(layers));
  }
  auto& predictors = lm->sparse_predictors();
  std::vector<torch::Tensor> params;
  for (auto& p : predictors) {
    for (const auto& t : p->parameters()) params.push_back(t);
  }
  torch::optim::Adam opt(params, torch::optim::AdamOptions(config.lr));
  auto losses = [&](size_t s) {
    std::vector<torch::Tensor> out;
    for (size_t l = 0; l < predictors.size(); ++l) {
      const LayerInputs& in = inputs[s][l];
      const auto [q_lr, k_lr] = predictors[l]->forward(in.x);
      out.push_back(sparse::predictor_loss(q_lr, k_lr, in.q, in.k, config.stride));
    }
    return out;
  };
  auto mean_losses = [&] {
    torch::NoGradGuard no_grad;
    std::vector<double> sum(predictors.size(), 0.0);
    for (size_t s = 0; s < inputs.size(); ++s) {
      const auto l = losses(s);
      for (size_t i = 0; i < l.size(); ++i) sum[i] += l[i].item<double>() / inputs.size();
    }
    return sum;
  };
  PredictorFit fit;
  fit.loss_first = mean_losses();
  for (int step = 0; step < config.steps; ++step) {
    opt.zero_grad();
    torch::stack(losses(step % inputs.size())).sum().backward();
    opt.step();
  }
  fit.loss_last = mean_losses();
  return fit;
}

}  // namespace streamrl::model
