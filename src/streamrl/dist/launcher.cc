// Local multi-process launcher (see launcher.h).
#include "streamrl/dist/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"

namespace streamrl::dist {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// One rank's process and the read ends of its stdout and stderr pipes.
struct Rank {
  pid_t pid = -1;
  int fds[2] = {-1, -1};   // stdout, stderr; -1 once at EOF
  std::string partial[2];  // an unterminated line
  bool exited = false;
  int code = 0;  // exit code, or 128 + signal
};

// Writes every complete line of `data` to `out` with `prefix`; keeps the tail in `partial`.
void forward(std::string& partial, const char* data, size_t n, const std::string& prefix,
             FILE* out) {
  partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = prefix + partial.substr(start, nl + 1 - start);
    std::fwrite(line.data(), 1, line.size(), out);
  }
  partial.erase(0, start);
  std::fflush(out);
}

pid_t spawn(const LaunchOptions& o, int rank, int port, int out_fd, int err_fd) {
  std::vector<std::string> argv_s = {o.program};
  argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeFailure(std::string("launch: fork failed: ") + std::strerror(errno));
  if (pid > 0) return pid;
  // Child: its own process group, so the launcher can signal a rank and everything it started.
  setpgid(0, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);  // streamrl ignores it; the launched command starts as the shell would
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  // Each rank's share of the cores (torchrun sets OMP_NUM_THREADS=1 for the same reason): ranks
  // that each took every core would run nproc x cores threads of ATen and OpenBLAS on `cores`.
  if (std::getenv(core::kCoresEnv) == nullptr) {
    setenv(core::kCoresEnv, std::to_string(std::max(1, core::available_cores() / o.nproc)).c_str(),
           1);
  }
  for (const auto& kv : o.env) {
    const size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);  // launch_local checked the '='
  }
  execv(argv[0], argv.data());
  std::fprintf(stderr, "launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

}  // namespace

int free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw RuntimeFailure("free_port: socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    close(fd);
    throw InputError("free_port: '" + addr + "' is not an IPv4 address");
  }
  socklen_t len = sizeof sa;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    close(fd);
    throw RuntimeFailure("free_port: cannot bind on " + addr + ": " + std::strerror(errno));
  }
  const int port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

int launch_local(const LaunchOptions& options) {
  LaunchOptions o = options;
  if (o.nproc < 1) throw InputError("launch: --nproc must be at least 1");
  if (o.program.empty()) o.program = std::filesystem::read_symlink("/proc/self/exe").string();
  if (access(o.program.c_str(), X_OK) != 0) {
    throw InputError("launch: '" + o.program + "' is not an executable");
  }
  for (const auto& kv : o.env) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      throw InputError("launch: environment entry '" + kv + "' is not NAME=VALUE");
    }
  }
  const int port = o.master_port > 0 ? o.master_port : free_port(o.master_addr);
  std::unique_ptr<FILE, int (*)(FILE*)> log(nullptr, &std::fclose);
  if (!o.log_file.empty()) {
    log.reset(std::fopen(o.log_file.c_str(), "ae"));
    if (!log) {
      throw InputError("launch: cannot open the log file " + o.log_file + ": " +
                       std::strerror(errno));
    }
  }

  struct sigaction sa {
  }, old_int{}, old_term{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_stop_signal.store(0);

  std::vector<Rank> ranks(o.nproc);
  for (int r = 0; r < o.nproc; ++r) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw RuntimeFailure("launch: pipe failed");
    }
    ranks[r].pid = spawn(o, r, port, out[1], err[1]);
    close(out[1]);
    close(err[1]);
    ranks[r].fds[0] = out[0];
    ranks[r].fds[1] = err[0];
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  int result = 0;  // the launch's exit code, fixed by the first failure
  bool stopping = false;
  Clock::time_point stop_at;
  bool killed = false;
  std::optional<Clock::time_point> exited_at;
  auto stop_all = [&](const std::string& why, int code) {
    if (stopping) return;
    stopping = true;
    stop_at = Clock::now();
    result = code;
    std::fprintf(stderr, "streamrl launch: %s\n", why.c_str());
    for (auto& rk : ranks) {
      if (!rk.exited) kill(-rk.pid, SIGTERM);
    }
  };

  for (;;) {
    // 1. Forward whatever output is ready.
    std::vector<pollfd> pfds;
    std::vector<std::pair<int, int>> owner;  // (rank, stream)
    for (int r = 0; r < o.nproc; ++r) {
      for (int k = 0; k < 2; ++k) {
        if (ranks[r].fds[k] >= 0) {
          pfds.push_back({ranks[r].fds[k], POLLIN, 0});
          owner.emplace_back(r, k);
        }
      }
    }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 100);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, k] = owner[i];
      char buf[8192];
      const ssize_t n = read(pfds[i].fd, buf, sizeof buf);
      const std::string prefix = "[rank " + std::to_string(r) + "] ";
      FILE* out = log ? log.get() : k == 0 ? stdout : stderr;
      if (n > 0) {
        forward(ranks[r].partial[k], buf, static_cast<size_t>(n), prefix, out);
      } else if (n == 0 || errno != EINTR) {
        if (!ranks[r].partial[k].empty()) forward(ranks[r].partial[k], "\n", 1, prefix, out);
        close(ranks[r].fds[k]);
        ranks[r].fds[k] = -1;
      }
    }

    // 2. Reap exited ranks; the first failure stops the rest.
    bool all_done = true, all_exited = true;
    for (int r = 0; r < o.nproc; ++r) {
      Rank& rk = ranks[r];
      if (!rk.exited) {
        int status = 0;
        if (waitpid(rk.pid, &status, WNOHANG) == rk.pid) {
          rk.exited = true;
          rk.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          if (rk.code != 0 && !stopping) {
            stop_all("rank " + std::to_string(r) + " " +
                         (WIFEXITED(status) ? "exited with code " + std::to_string(rk.code)
                                            : std::string("was killed by signal ") +
                                                  strsignal(WTERMSIG(status))) +
                         "; stopping the other ranks",
                     rk.code);
          }
        }
      }
      all_done = all_done && rk.exited && rk.fds[0] < 0 && rk.fds[1] < 0;
      all_exited = all_exited && rk.exited;
    }
    if (all_done) break;
    // A rank's leftover child may hold its pipes open; the rank's own exit is what counts.
    if (all_exited && since(exited_at.value_or(Clock::now())) > 1.0) break;
    if (all_exited && !exited_at) exited_at = Clock::now();
    if (pfds.empty()) usleep(20000);

    // 3. Timeout, a stop signal, and escalation to SIGKILL.
    if (const int sig = g_stop_signal.exchange(0); sig != 0) {
      stop_all(std::string("received ") + strsignal(sig) + "; stopping all ranks", 128 + sig);
    }
    if (!stopping && o.timeout_s > 0 && since(start) > o.timeout_s) {
      stop_all("timed out after " + std::to_string(static_cast<int>(o.timeout_s)) +
                   " s; stopping all ranks",
               1);
    }
    if (stopping && !killed && since(stop_at) > o.grace_s) {
      killed = true;
      for (auto& rk : ranks) {
        if (!rk.exited) kill(-rk.pid, SIGKILL);
      }
    }
  }
  for (auto& rk : ranks) {
    for (int fd : rk.fds) {
      if (fd >= 0) close(fd);
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace streamrl::dist
