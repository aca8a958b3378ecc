// Linear layers that read the same input, run as one GEMM over their concatenated weights (one
// part: a single layer). The inference path of small models uses it (q/k/v, gate/up, o, down): at
// hidden sizes of a few hundred a CPU decode step is dominated by per-GEMM costs (packing the
// weights and the input, call overhead), not FLOPs. On the CPU in float32 the weights are packed
// once for XNNPACK's GEMM (where libtorch has it), which skips OpenBLAS's per-call packing: 1.2-4x
// faster per call at 1-96 rows and hidden sizes 128-768; decode steps of the tiny model ~1.5x
// (bench model_speed), the engine's continuous batching ~1.2x (bench engine).
#pragma once

#include <ATen/core/ivalue.h>
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
  // The concatenation (or its packed form) is cached and rebuilt when a part's weight or bias
  // changed (its version counter or its storage: an optimizer step, a weight update, `place`).
  torch::Tensor forward(const torch::Tensor& x);

  // Whether forward on CPU float32 inputs runs XNNPACK's packed GEMM: libtorch built with it and
  // packing not switched off.
  static bool packs_weights();
  // Process-wide switch (default on), so a benchmark can time the same layers both ways.
  static void set_packing(bool on);

 private:
  std::vector<torch::nn::Linear> parts_;
  std::mutex mu_;
  torch::Tensor weight_, bias_;
  c10::IValue packed_;  // XNNPACK's LinearOpContext of weight_ and bias_, when built
  std::vector<std::pair<const void*, uint32_t>> key_;  // (storage, version) of every source
};

}  // namespace streamrl::model
