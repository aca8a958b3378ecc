#include "streamrl/core/fs.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "run_binary.h"
#include "streamrl/core/errors.h"

namespace streamrl::core {
namespace {
namespace fs = std::filesystem;

TEST(Fs, AtomicWriteRoundTripsAndLeavesNoTemp) {
  fs::path dir = testing_util::fresh_temp_dir("fs_test");
  fs::path file = dir / "sub" / "x.bin";
  write_file_atomic(file, std::string("abc\0def", 7));
  EXPECT_EQ(read_file(file), std::string("abc\0def", 7));
  write_file_atomic(file, "new");
  EXPECT_EQ(read_file(file), "new");
  int entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir / "sub")) ++entries;
  EXPECT_EQ(entries, 1);
  fs::remove_all(dir);
}

TEST(Fs, MissingFileIsInputError) { EXPECT_THROW(read_file("/nonexistent/file"), InputError); }

}  // namespace
}  // namespace streamrl::core
