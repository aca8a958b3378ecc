#include "run_binary.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

}  // namespace

RunResult run_streamrl(const std::vector<std::string>& args, int timeout_s) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    auto argv = make_argv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  RunResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[4096];
  int status = 0;
  while (true) {
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) r.output.append(buf, n);
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) r.output.append(buf, n);
      r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.output += "\n[killed after timeout]";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  close(pipefd[0]);
  return r;
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

ServeProcess::ServeProcess(const std::string& ckpt) {
  int out[2];
  if (pipe(out) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    const std::vector<std::string> args = {
        "serve", "--ckpt", ckpt, "--port", "0", "--threads", "1", "--max-seq-len", "512", "--json"};
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

}  // namespace streamrl::testing_util
