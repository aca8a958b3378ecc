// Measures this machine's fp32 GEMM throughput and memory bandwidth: the roofline that benchmarks
// report their figures against (`streamrl doctor`).
#pragma once

namespace streamrl::core {

struct Roofline {
  double gemm_gflops = 0;      // fp32 square GEMM, best of several runs, current thread budget
  double memory_gb_per_s = 0;  // large-tensor copy (read + write bytes), best of several runs
};

// Takes about a second. Uses the calling thread's ATen/BLAS thread budget.
Roofline measure_roofline();

}  // namespace streamrl::core
