#include "run_binary.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace streamrl::testing_util {
namespace {

// The pointers point into `args`, which must outlive the result.
std::vector<char*> make_argv(const std::vector<std::string>& args) {
  static std::string binary = STREAMRL_BINARY;
  std::vector<char*> argv;
  argv.push_back(binary.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// In the child, before exec: joins the network namespace and sets the environment.
void enter(const ProcessOptions& o) {
  if (!o.netns.empty()) {
    const int fd = open(("/run/netns/" + o.netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    close(fd);
  }
  for (const auto& [k, v] : o.env) setenv(k.c_str(), v.c_str(), 1);
}

}  // namespace

BackgroundRun::BackgroundRun(const std::vector<std::string>& args, const ProcessOptions& options) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    enter(options);
    auto argv = make_argv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  const int fd = pipefd[0];
  // Drains the pipe as the child writes, so a chatty child never blocks on a full pipe.
  reader_ = std::thread([this, fd] {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      output_.append(buf, n);
    }
    close(fd);
  });
}

BackgroundRun::~BackgroundRun() {
  kill_now();
  if (reader_.joinable()) reader_.join();
}

bool BackgroundRun::running() {
  if (pid_ <= 0 || reaped_) return false;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

RunResult BackgroundRun::wait(int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool timed_out = running();
  kill_now();
  if (reader_.joinable()) reader_.join();  // the pipe closes with the child
  RunResult r;
  r.output = output_;
  if (timed_out) r.output += "\n[killed after timeout]";
  if (!timed_out && !killed_ && WIFSIGNALED(status_)) {
    r.output += "\n[ended by signal " + std::to_string(WTERMSIG(status_)) + "]";
  }
  r.exit_code = !timed_out && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  return r;
}

void BackgroundRun::kill_now() {
  if (!running()) return;
  killed_ = true;
  kill(pid_, SIGKILL);
  waitpid(pid_, &status_, 0);
  reaped_ = true;
}

RunResult run_streamrl(const std::vector<std::string>& args, int timeout_s,
                       const ProcessOptions& options) {
  return BackgroundRun(args, options).wait(timeout_s);
}

pid_t spawn_streamrl(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    auto argv = make_argv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

std::string fresh_temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("streamrl_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

ServeProcess::ServeProcess(const std::string& ckpt, const ProcessOptions& options,
                           const std::string& host) {
  int out[2];
  if (pipe(out) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    enter(options);
    const std::vector<std::string> args = {"serve", "--ckpt",        ckpt,  "--host",
                                           host,    "--port",        "0",   "--threads",
                                           "1",     "--max-seq-len", "512", "--json"};
    auto argv = make_argv(args);  // points into args
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  out_ = out[0];
}

ServeProcess::~ServeProcess() {
  kill_now();
  if (out_ >= 0) close(out_);
}

std::string ServeProcess::wait_for_url() {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  char c;
  while (out_ >= 0 && std::chrono::steady_clock::now() < end) {
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(out_, &c, 1) != 1) return "";
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.contains("url") ? j["url"].get<std::string>() : "";
  }
  return "";
}

void ServeProcess::send_signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

void ServeProcess::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string write_tiny_sft_config(const std::string& dir) {
  const std::string path = dir + "/sft.yaml";
  std::ofstream f(path);
  f << "run: {dir: " << dir << "/runs, name: sft, threads: 1}\n"
    << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_model.json}\n"
    << "train: {steps: 10, batch_size: 8, optim: {lr: 0.003}}\n"
    << "eval: {n: 0}\ncheckpoint: {every: 0}\n";
  return path;
}

}  // namespace streamrl::testing_util
