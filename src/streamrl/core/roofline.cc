#include "streamrl/core/roofline.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace streamrl::core {
namespace {

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

}  // namespace

Roofline measure_roofline() {
  torch::NoGradGuard no_grad;
  Roofline r;
  const int64_t n = 1024;
  auto a = torch::randn({n, n});
  auto b = torch::randn({n, n});
  auto c = torch::empty({n, n});
  torch::mm_out(c, a, b);  // warm-up: thread pools, page faults
  double s = best_seconds(5, [&] { torch::mm_out(c, a, b); });
  r.gemm_gflops = 2.0 * n * n * n / s / 1e9;

  // 64 MiB: well beyond the last-level cache, so this measures DRAM.
  auto src = torch::ones({16 * 1024 * 1024});
  auto dst = torch::empty_like(src);
  dst.copy_(src);
  double t = best_seconds(5, [&] { dst.copy_(src); });
  r.memory_gb_per_s = 2.0 * src.numel() * sizeof(float) / t / 1e9;
  return r;
}

}  // namespace streamrl::core
