// `streamrl launch`: a local multi-process run in torchrun's conventions. Starts N
// copies of a program with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set, forwards each one's output line by line with a "[rank r] " prefix, and ends the
// run as soon as one fails: the others get SIGTERM, then SIGKILL after a grace period.
#pragma once

#include <string>
#include <vector>

namespace streamrl::dist {

struct LaunchOptions {
  int nproc = 1;
  std::string program;            // executable path; empty: this process's own binary
  std::vector<std::string> args;  // arguments after the program name
  std::string master_addr = "127.0.0.1";
  int master_port = 0;           // 0: a free port on master_addr
  double timeout_s = 0;          // whole run; 0 = none
  double grace_s = 5;            // SIGTERM -> SIGKILL
  std::vector<std::string> env;  // NAME=VALUE, set in every rank
  std::string log_file;  // when set, the ranks' prefixed output is appended there, not to ours
};

// Runs the processes to the end and returns the launch's exit code: 0 when every rank exited 0,
// otherwise the first failing rank's code (128 + signal for a signal, 1 for the run's timeout),
// with one line on stderr saying which rank failed how. SIGINT/SIGTERM to the launcher are
// forwarded to the ranks. Throws InputError for nproc < 1 or a missing program.
int launch_local(const LaunchOptions& options);

// A TCP port that was free on `addr` a moment ago (bound to port 0, then released).
int free_port(const std::string& addr = "127.0.0.1");

}  // namespace streamrl::dist
