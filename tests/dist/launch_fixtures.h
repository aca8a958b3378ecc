// Worker tests that run as ranks of `streamrl launch`: a driver test starts copies of this test
// binary under the launcher with a gtest filter naming the worker test; outside the launcher the
// worker tests skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "run_binary.h"

namespace streamrl::dist {

inline constexpr const char* kWorkerEnv = "STREAMRL_DIST_WORKER";

#define REQUIRE_WORKER()                                                                        \
  if (std::getenv(::streamrl::dist::kWorkerEnv) == nullptr || std::getenv("RANK") == nullptr) { \
    GTEST_SKIP() << "runs as a rank under streamrl launch (see the Launch tests)";              \
  }

// Runs the worker test `filter` (Suite.Name) as `nproc` ranks under `streamrl launch`.
inline testing_util::RunResult launch_workers(const std::string& filter, int nproc = 2,
                                              int timeout_s = 60) {
  setenv(kWorkerEnv, "1", 1);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto r = testing_util::run_streamrl(
      {"launch", "--nproc", std::to_string(nproc), "--grace", "1", "--timeout",
       std::to_string(timeout_s), "--program", self, "--", "--gtest_filter=" + filter},
      timeout_s + 30);
  unsetenv(kWorkerEnv);
  return r;
}

}  // namespace streamrl::dist
