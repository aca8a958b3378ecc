// `streamrl train` end to end at tiny scale: metrics per iteration, and a run killed with SIGKILL
// resumes from its last checkpoint with identical metrics afterwards.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

class RlTrain : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing_util::fresh_temp_dir("rl_train");
    std::ofstream f(dir_ + "/sft.yaml");
    f << "run: {dir: " << dir_ << "/runs, name: sft, threads: 1}\n"
      << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_model.json}\n"
      << "train: {steps: 10, batch_size: 8, optim: {lr: 0.003}}\n"
      << "eval: {n: 0}\ncheckpoint: {every: 0}\n";
    f.close();
    auto r = run_streamrl({"sft", "--config", dir_ + "/sft.yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream g(dir_ + "/rl.yaml");
    g << "run: {dir: " << dir_ << "/runs, threads: 1, seed: 3}\n"
      << "policy: {init_from: " << dir_ << "/runs/sft/final}\n"
      << "rollout: {prompts_per_iteration: 3, group_size: 4, max_new_tokens: 24}\n"
      << "train: {iterations: 6, optim: {lr: 0.001}}\n"
      << "algo: {kl: {coef: 0.01}}\n"
      << "eval: {every: 0, n: 6, max_new_tokens: 24}\n"
      << "checkpoint: {every: 2, keep: 2}\n";
  }
  static std::string dir_;
};
std::string RlTrain::dir_;

TEST_F(RlTrain, LogsEveryIterationAndReportsAccuracy) {
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=full", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_TRUE(j.contains("accuracy_before"));
  EXPECT_TRUE(j.contains("accuracy_after"));
  auto m = read_metrics(dir_ + "/runs/full/metrics.jsonl");
  int iterations = 0;
  for (const auto& rec : m) {
    if (!rec.contains("reward_mean")) continue;
    ++iterations;
    for (const char* key : {"accuracy", "response_length", "kl", "entropy", "clip_fraction",
                            "grad_norm", "lr", "generated_tokens_per_s", "samples_per_s",
                            "stage_seconds", "idle_fraction", "weight_version"}) {
      EXPECT_TRUE(rec.contains(key)) << key;
    }
    EXPECT_EQ(rec["samples"].get<int>(), 12);
    // One update per rollout: the ratio never leaves the clip range.
    EXPECT_LT(rec["clip_fraction"].get<double>(), 1e-9);
  }
  EXPECT_EQ(iterations, 6);
}

TEST_F(RlTrain, SigkillThenResumeGivesIdenticalMetrics) {
  auto full = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=ref", "--json"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  pid_t pid =
      testing_util::spawn_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=killed"});
  fs::path marker = fs::path(dir_) / "runs/killed/checkpoints/step_2/trainer_state.json";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(marker) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(fs::exists(marker));
  ASSERT_FALSE(fs::exists(fs::path(dir_) / "runs/killed/final")) << "run finished before the kill";
  auto resumed =
      run_streamrl({"train", "--config", dir_ + "/rl.yaml", "run.name=killed", "--json"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = read_metrics(dir_ + "/runs/ref/metrics.jsonl");
  auto b = read_metrics(dir_ + "/runs/killed/metrics.jsonl");
  auto iteration_records = [](const std::vector<nlohmann::json>& v) {
    std::vector<nlohmann::json> out;
    for (auto rec : v) {
      if (!rec.contains("reward_mean")) continue;
      rec.erase("stage_seconds");  // wall-clock figures differ between runs
      rec.erase("idle_fraction");
      rec.erase("generated_tokens_per_s");
      rec.erase("samples_per_s");
      out.push_back(rec);
    }
    return out;
  };
  auto ra = iteration_records(a), rb = iteration_records(b);
  ASSERT_EQ(ra.size(), 6u);
  ASSERT_EQ(rb.size(), 6u);
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(ra[i], rb[i]) << "iteration " << i + 1;
}

TEST_F(RlTrain, UnknownModeAndMissingPolicyAreInputErrors) {
  auto r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "mode=nope"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "policy.init_from=/nonexistent"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace streamrl
