// Runs the streamrl binary from tests: captured output and exit code, or a background process
// that a test can kill.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace streamrl::testing_util {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr interleaved
};

// Where a child runs: inside a network namespace (one "host" of a multi-host test, made with
// `ip netns add NAME`) and with extra environment variables.
struct ProcessOptions {
  std::string netns;  // "" = this process's network
  std::vector<std::pair<std::string, std::string>> env;
};

// `streamrl ARGS...` in the background with its output captured; killed with SIGKILL when this
// object goes away.
class BackgroundRun {
 public:
  explicit BackgroundRun(const std::vector<std::string>& args, const ProcessOptions& options = {});
  ~BackgroundRun();
  BackgroundRun(const BackgroundRun&) = delete;
  BackgroundRun& operator=(const BackgroundRun&) = delete;

  // Waits for the exit, at most `timeout_s` (then kills it: exit code -1). A child that a signal
  // ended (other than kill_now's) has exit code -1 and "[ended by signal N]" after its output.
  RunResult wait(int timeout_s);
  bool running();
  void kill_now();  // SIGKILL, as when its host dies

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  bool killed_ = false;  // by kill_now
  std::mutex mu_;
  std::string output_;
  std::thread reader_;
};

// Runs `streamrl ARGS...` to completion with a `timeout_s` limit (killed and reported as exit
// code -1 past it).
RunResult run_streamrl(const std::vector<std::string>& args, int timeout_s = 300,
                       const ProcessOptions& options = {});

// Starts `streamrl ARGS...` in the background with output to /dev/null; returns its pid.
pid_t spawn_streamrl(const std::vector<std::string>& args);

// A fresh empty directory under the system temp dir, unique to this process and `name`.
std::string fresh_temp_dir(const std::string& name);

// Writes DIR/sft.yaml (10 SFT steps of tests/data/tiny_model.json into DIR/runs/sft, one thread,
// no evaluation or intermediate checkpoints: a starting policy for RL tests); returns its path.
std::string write_tiny_sft_config(const std::string& dir);

// The last non-empty line of `text`.
std::string last_line(const std::string& text);

// `streamrl serve --ckpt CKPT --host HOST --port 0` as a child process (one thread), killed with
// SIGKILL when this object goes away.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& ckpt, const ProcessOptions& options = {},
                        const std::string& host = "127.0.0.1");
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // The URL of its {"url": ...} startup line; "" when none came within 120 s.
  std::string wait_for_url();
  void kill_now();
  // Sends `sig` (e.g. SIGSTOP to freeze the process, SIGCONT to thaw it).
  void send_signal(int sig);

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

}  // namespace streamrl::testing_util
