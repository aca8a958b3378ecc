#include "streamrl/core/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace streamrl::core {
namespace {

constexpr int kMmapThreshold = 32 << 20;   // glibc's own upper limit for the dynamic threshold
constexpr int kTrimThreshold = 256 << 20;  // keep a few steps' activations in the heap
bool g_tuned = false;

}  // namespace

void tune_allocator() {
  const char* env = std::getenv("STREAMRL_MALLOC");
  if (env != nullptr && std::strcmp(env, "default") == 0) return;
  // mallopt returns 1 on success; a non-glibc allocator ignores or refuses it.
  g_tuned = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
            mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
}

std::string allocator_setting() {
  if (!g_tuned) return "glibc default";
  return "fixed thresholds (mmap " + std::to_string(kMmapThreshold >> 20) + " MiB, trim " +
         std::to_string(kTrimThreshold >> 20) + " MiB)";
}

}  // namespace streamrl::core
