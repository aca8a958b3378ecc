// SFT killed with SIGKILL and restarted resumes from its last checkpoint and reaches the same final
// loss as an uninterrupted run of the same seed (issue: SFT warm start, tiny scale).
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

std::string write_config(const std::string& dir) {
  std::string path = dir + "/sft.yaml";
  std::ofstream f(path);
  f << "run: {dir: " << dir << "/runs, seed: 5, threads: 1}\n"
    << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_model.json, tokenizer: char}\n"
    << "data: {task: sum}\n"
    << "train: {steps: 40, batch_size: 8, log_every: 1, optim: {lr: 0.003, warmup_steps: 5}}\n"
    << "eval: {n: 0}\n"
    << "checkpoint: {every: 8, keep: 2}\n";
  return path;
}

TEST(SftResume, SigkillThenRestartMatchesUninterruptedRun) {
  std::string dir = testing_util::fresh_temp_dir("sft_resume");
  std::string cfg = write_config(dir);

  auto full = run_streamrl({"sft", "--config", cfg, "run.name=full", "--json"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  double full_loss = nlohmann::json::parse(last_line(full.output))["final_loss"].get<double>();

  // Kill the second run as soon as its second checkpoint exists.
  pid_t pid = testing_util::spawn_streamrl({"sft", "--config", cfg, "run.name=killed"});
  fs::path marker = fs::path(dir) / "runs/killed/checkpoints/step_16/trainer_state.json";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(marker) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(fs::exists(marker)) << "no checkpoint appeared before the deadline";
  ASSERT_FALSE(fs::exists(fs::path(dir) / "runs/killed/final")) << "run finished before the kill";

  auto resumed = run_streamrl({"sft", "--config", cfg, "run.name=killed", "--json"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto r = nlohmann::json::parse(last_line(resumed.output));
  EXPECT_GE(r["resumed_from_step"].get<int>(), 16);
  EXPECT_DOUBLE_EQ(r["final_loss"].get<double>(), full_loss);
  fs::remove_all(dir);
}

TEST(SftConfig, TyposAndBadValuesAreOneLineErrors) {
  std::string dir = testing_util::fresh_temp_dir("sft_cfg");
  std::string cfg = write_config(dir);
  auto r = run_streamrl({"sft", "--config", cfg, "train.stpes=3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown config key 'train.stpes' (did you mean 'train.steps'?)"),
            std::string::npos)
      << r.output;
  r = run_streamrl({"sft", "--config", cfg, "train.optim.lr=-1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_streamrl({"sft", "--config", cfg, "data.task=nosuchtask"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nosuchtask"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(SftData, MalformedJsonlStopsBeforeTraining) {
  std::string dir = testing_util::fresh_temp_dir("sft_jsonl");
  std::string cfg = write_config(dir);
  {
    std::ofstream f(dir + "/data.jsonl");
    f << "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n{\"prompt\": \"2+2=\"\n";
  }
  auto r = run_streamrl({"sft", "--config", cfg, "data.jsonl=" + dir + "/data.jsonl"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.jsonl:2:"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/runs/sft/checkpoints"));
  fs::remove_all(dir);
}

// DSV through `streamrl sft`: with permissive thresholds every head switches after the warm-up;
// the checkpoint keeps predictors, sparse heads and the profile, and a resumed run continues them.
TEST(SftSparse, HeadsSwitchAndAResumedRunContinuesTheProfile) {
  std::string dir = testing_util::fresh_temp_dir("sft_sparse");
  std::string cfg = write_config(dir);
  const std::vector<std::string> dsv = {"model.sparse_attention.enabled=true",
                                        "model.sparse_attention.rank=4",
                                        "model.sparse_attention.block=4",
                                        "model.sparse_attention.keep=2",
                                        "model.sparse_attention.min_tokens=0",
                                        "model.sparse_attention.stride=2",
                                        "model.sparse_attention.warmup_steps=3",
                                        "model.sparse_attention.sparsity_threshold=0",
                                        "model.sparse_attention.min_coverage=0",
                                        "model.sparse_attention.loss_threshold=100",
                                        "checkpoint.every=3"};
  auto args = [&](const std::string& steps, const std::string& name = "dsv") {
    std::vector<std::string> a = {
        "sft", "--config", cfg, "run.name=" + name, "train.steps=" + steps, "--json"};
    a.insert(a.end(), dsv.begin(), dsv.end());
    return a;
  };
  auto first = run_streamrl(args("6"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto r = nlohmann::json::parse(last_line(first.output));
  EXPECT_EQ(r["sparse_attention"]["sparse_heads"], 8) << r.dump();
  EXPECT_EQ(r["sparse_attention"]["observed"], 6);
  EXPECT_TRUE(std::isfinite(r["final_loss"].get<double>()));
  const fs::path final_dir = fs::path(dir) / "runs/dsv/final";
  EXPECT_TRUE(fs::exists(final_dir / "sparse_attention.safetensors"));
  EXPECT_TRUE(fs::exists(final_dir / "sparse_attention.json"));

  EXPECT_TRUE(
      fs::exists(fs::path(dir) / "runs/dsv/checkpoints/step_6" / "sparse_attention_optimizer.pt"));

  auto resumed = run_streamrl(args("9"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  r = nlohmann::json::parse(last_line(resumed.output));
  EXPECT_EQ(r["resumed_from_step"], 6);
  EXPECT_EQ(r["sparse_attention"]["observed"], 9) << r.dump();
  EXPECT_EQ(r["sparse_attention"]["sparse_heads"], 8);
  // The predictors' Adam state came back too: they end where an uninterrupted run's do.
  auto straight = run_streamrl(args("9", "straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto bytes = [&](const std::string& run) {
    std::ifstream f(fs::path(dir) / "runs" / run / "final/sparse_attention.safetensors",
                    std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_FALSE(bytes("straight").empty());
  EXPECT_TRUE(bytes("dsv") == bytes("straight")) << "the resumed run's predictors differ";
  EXPECT_DOUBLE_EQ(r["final_loss"].get<double>(),
                   nlohmann::json::parse(last_line(straight.output))["final_loss"].get<double>());

  // Bad values name their key; DSV is one process, so pipeline stages are refused.
  auto bad = run_streamrl({"sft", "--config", cfg, "run.name=bad", "model.sparse_attention.keep=1",
                           "model.sparse_attention.recent=1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("model.sparse_attention.keep"), std::string::npos) << bad.output;
  bad = run_streamrl({"sft", "--config", cfg, "run.name=bad", "model.sparse_attention.enabled=true",
                      "parallel.pp=2"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("parallel.pp"), std::string::npos) << bad.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl
