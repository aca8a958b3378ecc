// Core budgets: a role that is given k cores sets both ATen's OpenMP pool and OpenBLAS's own pool,
// so roles that share a machine do not oversubscribe it.
#pragma once

#include <string>

namespace streamrl::core {

// Sets the intra-op threads of the calling thread (ATen/OpenMP) and OpenBLAS's pool to `threads`.
// OpenMP's setting is per calling thread; OpenBLAS's is process-wide.
void apply_core_budget(int threads);

// Current ATen intra-op threads and OpenBLAS threads.
int aten_threads();
int blas_threads();

// The shared object that `libblas.so.3` resolves to in this process (e.g. ".../openblas-pthread/
// libblas.so.3"), and OpenBLAS's config string when OpenBLAS is loaded ("" otherwise).
std::string active_blas_library();
std::string openblas_config();

// OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and falls back to its Prescott (SSE3)
// kernels, 3-5x slower than AVX2/AVX-512 ones. When OPENBLAS_CORETYPE is unset, OpenBLAS chose
// Prescott and the CPU has AVX2+FMA, this re-executes the process with OPENBLAS_CORETYPE set to the
// matching kernel (the variable is only read when the library loads). Call first thing in main().
// Returns normally when nothing needs changing or the re-exec failed.
void select_blas_kernel(char** argv);

// OpenBLAS's kernel name ("Haswell", "SkylakeX", ...), "" when OpenBLAS is not loaded.
std::string openblas_core_name();

// Number of cores this process may use: its sched affinity, capped by STREAMRL_CORES when that
// is a positive integer (`streamrl launch` gives each of its nproc ranks cores / nproc). At
// least 1.
int available_cores();
inline constexpr const char* kCoresEnv = "STREAMRL_CORES";

// CPU seconds the calling thread has run. Beside a wall-clock time it tells work from waiting for a
// core that other processes hold (the machine is shared).
double thread_cpu_seconds();

}  // namespace streamrl::core
