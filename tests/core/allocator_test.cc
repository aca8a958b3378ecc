#include "streamrl/core/allocator.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>

namespace streamrl::core {
namespace {

// With glibc's default (dynamic) threshold a fresh process serves a 4 MiB block with mmap; after
// tune_allocator it comes from the heap, so freeing and reusing it does not fault in new pages.
TEST(Allocator, LargeBlocksComeFromTheHeapOnceTuned) {
  unsetenv("STREAMRL_MALLOC");
  tune_allocator();
  EXPECT_EQ(allocator_setting(), "fixed thresholds (mmap 32 MiB, trim 256 MiB)");
  const int mmapped_before = mallinfo2().hblks;
  void* p = std::malloc(4 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mmapped_before);
  std::free(p);
  void* big = std::malloc(64 << 20);  // above the fixed threshold: still mmap'd
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(mallinfo2().hblks, mmapped_before + 1);
  std::free(big);
}

}  // namespace
}  // namespace streamrl::core
