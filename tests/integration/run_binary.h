// Runs the streamrl binary from tests: captured output and exit code, or a background process
// that a test can kill.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace streamrl::testing_util {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// Runs `streamrl ARGS...` to completion with a `timeout_s` limit (killed and reported as exit
// code -1 past it).
RunResult run_streamrl(const std::vector<std::string>& args, int timeout_s = 300);

// Starts `streamrl ARGS...` in the background with output to /dev/null; returns its pid.
pid_t spawn_streamrl(const std::vector<std::string>& args);

// A fresh empty directory under the system temp dir, unique to this process and `name`.
std::string fresh_temp_dir(const std::string& name);

// The last non-empty line of `text`.
std::string last_line(const std::string& text);

}  // namespace streamrl::testing_util
