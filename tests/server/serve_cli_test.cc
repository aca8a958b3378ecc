// `streamrl serve` end to end: it prints its address (port 0 picks a free one), answers HTTP, and
// exits 0 on SIGTERM.
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../tiny_model.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl {
namespace {

namespace fs = std::filesystem;

// A tiny random checkpoint with the char tokenizer.
std::string write_checkpoint() {
  model::CausalLM lm = testing_util::tiny_model(5, 100, 256, /*initializer_range=*/0);
  const fs::path dir = fs::temp_directory_path() / ("serve_cli_" + std::to_string(getpid()));
  fs::remove_all(dir);
  model::save_checkpoint(dir / "tiny", lm, tokenizer::make_tokenizer("char")->to_json());
  return (dir / "tiny").string();
}

// Reads one line from `fd`, waiting at most `timeout_s`; "" on timeout or EOF.
std::string read_line(int fd, int timeout_s) {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char c;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(fd, &c, 1) != 1) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
  return "";
}

TEST(ServeCli, PrintsAddressServesAndStopsOnSigterm) {
  const std::string ckpt = write_checkpoint();
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(STREAMRL_BINARY, STREAMRL_BINARY, "serve", "--ckpt", ckpt.c_str(), "--port", "0",
          "--threads", "1", "--max-seq-len", "128", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  const std::string line = read_line(out[0], 120);
  const std::string prefix = "serving " + ckpt + " on http://127.0.0.1:";
  ASSERT_TRUE(line.starts_with(prefix)) << "got: '" << line << "'";
  const int port = std::stoi(line.substr(prefix.size()));

  httplib::Client cli("127.0.0.1", port);
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto res =
      cli.Post("/v1/completions", R"({"prompt": "2+2=", "max_tokens": 4})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->body.find("\"model\":\"tiny\""), std::string::npos) << res->body;

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  if (!WIFEXITED(status)) kill(pid, SIGKILL), waitpid(pid, &status, 0);
  close(out[0]);
  fs::remove_all(fs::path(ckpt).parent_path());
}

}  // namespace
}  // namespace streamrl
