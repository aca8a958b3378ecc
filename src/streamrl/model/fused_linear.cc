#include "streamrl/model/fused_linear.h"

namespace streamrl::model {

torch::Tensor FusedLinear::forward(const torch::Tensor& x) {
  std::vector<std::pair<const void*, uint32_t>> key;
  bool any_bias = false;
  for (const auto& p : parts_) {
    key.emplace_back(p->weight.data_ptr(), p->weight._version());
    if (p->bias.defined()) {
      key.emplace_back(p->bias.data_ptr(), p->bias._version());
      any_bias = true;
    }
  }
  torch::Tensor weight, bias;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (key != key_ || !weight_.defined()) {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> ws, bs;
      for (const auto& p : parts_) {
        ws.push_back(p->weight.detach());
        if (any_bias) {
          bs.push_back(p->bias.defined() ? p->bias.detach()
                                         : torch::zeros({p->weight.size(0)}, p->weight.options()));
        }
      }
      weight_ = torch::cat(ws, 0);
      bias_ = any_bias ? torch::cat(bs, 0) : torch::Tensor();
      key_ = std::move(key);
    }
    weight = weight_;
    bias = bias_;
  }
  return torch::linear(x, weight, bias);
}

}  // namespace streamrl::model
