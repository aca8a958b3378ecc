// Linear layers that read the same input, run as one GEMM over their concatenated weights. The
// inference path of small models uses it (q/k/v, gate/up): at hidden sizes of a few hundred a
// CPU decode step is dominated by per-GEMM costs (packing the input, call overhead), not FLOPs.
#pragma once

#include <torch/torch.h>

#include <mutex>
#include <utility>
#include <vector>

namespace streamrl::model {

class FusedLinear {
 public:
  FusedLinear() = default;
  explicit FusedLinear(std::vector<torch::nn::Linear> parts) : parts_(std::move(parts)) {}

  // [..., sum of the parts' out_features]: the parts' outputs side by side. Not differentiable.
  // The concatenation is cached and rebuilt when a part's weight or bias changed (its version
  // counter or its storage: an optimizer step, a weight update, `place`).
  torch::Tensor forward(const torch::Tensor& x);

 private:
  std::vector<torch::nn::Linear> parts_;
  std::mutex mu_;
  torch::Tensor weight_, bias_;
  std::vector<std::pair<const void*, uint32_t>> key_;  // (storage, version) of every source
};

}  // namespace streamrl::model
