#include "streamrl/model/swiglu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace streamrl::model {
namespace {

// One row, compiled for AVX-512, AVX2 and baseline x86-64 so the loop vectorises (exp from libmvec
// under -ffast-math). The exponent is capped, so a very negative gate gives 0, not 0 * inf.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void swiglu_row(
    const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(std::min(-g, 80.0f))) * up[i];
  }
}

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate_up) {
  const int64_t I = gate_up.size(-1) / 2;
  if (!gate_up.is_cpu() || gate_up.scalar_type() != torch::kFloat32) {
    return torch::silu(gate_up.narrow(-1, 0, I)) * gate_up.narrow(-1, I, I);
  }
  const torch::Tensor in = gate_up.contiguous();
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes.back() = I;
  torch::Tensor out = torch::empty(sizes, in.options());
  const int64_t rows = I > 0 ? out.numel() / I : 0;
  const float* ip = in.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      swiglu_row(ip + r * 2 * I, ip + r * 2 * I + I, op + r * I, I);
  });
  return out;
}

}  // namespace streamrl::model
