#include "streamrl/model/decode_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace streamrl::model {
namespace {

// The two inner loops, compiled for AVX2 and baseline x86-64; the loader picks one per CPU.
// Eight independent partial sums: without -ffast-math the compiler may not reorder one running
// sum, but it vectorises eight of them into one register.
__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b,
                                                            int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}

__attribute__((target_clones("avx2", "default"))) void axpy(float alpha, const float* x, float* y,
                                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                               const torch::Tensor& v_cache, const torch::Tensor& slots,
                               const torch::Tensor& lens, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && q.scalar_type() == torch::kFloat32,
              "decode_attention: bad shapes or layout");
  const torch::Tensor qc = q.contiguous();
  const int64_t N = q.size(0), H = q.size(1), hd = q.size(2);
  const int64_t Hkv = k_cache.size(1), T = k_cache.size(2), G = H / Hkv;
  torch::Tensor out = torch::zeros({N, H, hd});
  const float* qp = qc.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> w;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t len = lp[n];
      w.resize(len);
      for (int64_t j = 0; j < Hkv; ++j) {
        const float* kbase = kp + ((sp[n] * Hkv + j) * T) * hd;
        const float* vbase = vp + ((sp[n] * Hkv + j) * T) * hd;
        for (int64_t g = 0; g < G; ++g) {
          const int64_t h = j * G + g;
          const float* qv = qp + (n * H + h) * hd;
          float mx = std::numeric_limits<float>::lowest();
          for (int64_t l = 0; l < len; ++l) {
            w[l] = dot(qv, kbase + l * hd, hd) * sc;
            mx = std::max(mx, w[l]);
          }
          // A separate loop so that it vectorises (libmvec expf under -ffast-math, see CMake).
          for (int64_t l = 0; l < len; ++l) w[l] = std::exp(w[l] - mx);
          float sum = 0;
          for (int64_t l = 0; l < len; ++l) sum += w[l];
          float* ov = op + (n * H + h) * hd;
          const float inv = 1.0f / sum;
          for (int64_t l = 0; l < len; ++l) axpy(w[l] * inv, vbase + l * hd, ov, hd);
        }
      }
    }
  });
  return out;
}

}  // namespace streamrl::model
