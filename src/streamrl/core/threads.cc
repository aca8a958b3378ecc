#include "streamrl/core/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <link.h>
#include <sched.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace streamrl::core {
namespace {

// OpenBLAS's control functions, looked up at run time: the process may be running another BLAS
// (then they are absent and we report it instead of failing to link).
template <class F>
F blas_symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void apply_core_budget(int threads) {
  if (threads < 1) threads = 1;
  at::set_num_threads(threads);
  if (auto set = blas_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

int aten_threads() { return at::get_num_threads(); }

int blas_threads() {
  if (auto get = blas_symbol<int (*)()>("openblas_get_num_threads")) return get();
  return -1;
}

std::string openblas_config() {
  if (auto cfg = blas_symbol<const char* (*)()>("openblas_get_config")) return cfg();
  return "";
}

std::string active_blas_library() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name && (std::strstr(name, "libblas") || std::strstr(name, "libopenblas"))) {
          *static_cast<std::string*>(data) = name;
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

std::string openblas_core_name() {
  if (auto name = blas_symbol<const char* (*)()>("openblas_get_corename")) return name();
  return "";
}

void select_blas_kernel(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user (or we, before exec) chose
  if (openblas_core_name() != "Prescott") return;
  __builtin_cpu_init();
  const char* kernel = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    kernel = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    kernel = "Haswell";
  }
  if (kernel == nullptr) return;
  setenv("OPENBLAS_CORETYPE", kernel, 1);
  execv("/proc/self/exe", argv);  // only returns on failure: keep running with the slow kernel
}

int available_cores() {
  int n = 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
  if (const char* cap = std::getenv(kCoresEnv)) {
    char* end = nullptr;
    const long v = std::strtol(cap, &end, 10);
    if (end != cap && *end == '\0' && v > 0) n = std::min<int>(n, static_cast<int>(v));
  }
  return n;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace streamrl::core
