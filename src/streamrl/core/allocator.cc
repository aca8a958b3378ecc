#include "streamrl/core/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

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
  return g_tuned ? "fixed thresholds (mmap 32 MiB, trim 256 MiB)" : "glibc default";
}

}  // namespace streamrl::core
