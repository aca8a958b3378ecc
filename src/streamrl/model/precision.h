// What differs between the libtorch versions streamrl builds against (Debian's 1.13 CPU build and
// a Python PyTorch's >= 2.1 CUDA build), decided at compile time, and mixed precision on CUDA.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

// libtorch's fused attention (at::scaled_dot_product_attention with a `scale` argument).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define STREAMRL_HAS_SDPA 1
#else
#define STREAMRL_HAS_SDPA 0
#endif

namespace streamrl::model {

// While alive, CUDA ops on `device` run under autocast to `dtype` (matmuls in bf16, reductions
// and softmax in fp32, the master weights untouched). No-op on the CPU, for fp32, and when
// autocast is already on (nested scorers keep the outer setting).
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, torch::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
};

}  // namespace streamrl::model
