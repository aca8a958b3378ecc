// The streamrl binary end to end: exit codes and one-line errors for bad input, init/generate,
// and deterministic generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

const std::string kTinyModel = std::string(STREAMRL_TEST_DATA_DIR) + "/tiny_model.json";

// A bad-input failure: exit code 2 and a single "streamrl: error: ..." line.
void expect_input_error(const std::vector<std::string>& args, const std::string& needle) {
  auto r = run_streamrl(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("streamrl: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "more than one line: " << r.output;
}

TEST(Cli, UsageErrorsExitWithTwo) {
  auto r = run_streamrl({"no-such-command"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_streamrl({"init", "--out", "/tmp/x"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_streamrl({"bench", "nope"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(Cli, InitGenerateIsDeterministic) {
  std::string dir = testing_util::fresh_temp_dir("cli_init");
  auto r = run_streamrl({"init", "--model-config", kTinyModel, "--tokenizer", "char", "--out",
                         dir + "/ck", "--seed", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto info = nlohmann::json::parse(last_line(r.output));
  EXPECT_GT(info["parameters"].get<int64_t>(), 0);
  std::vector<std::string> gen = {"generate", "--ckpt", dir + "/ck", "--prompt", "12+7=",
                                  "--prompt", "3+4+5=", "--n",       "2",        "--max-new-tokens",
                                  "16",       "--seed", "9",         "--json"};
  auto a = run_streamrl(gen), b = run_streamrl(gen);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto ja = nlohmann::json::parse(last_line(a.output));
  auto jb = nlohmann::json::parse(last_line(b.output));
  ASSERT_EQ(ja["samples"].size(), 4u);
  EXPECT_EQ(ja, jb);
  gen[gen.size() - 2] = "10";
  auto c = nlohmann::json::parse(last_line(run_streamrl(gen).output));
  EXPECT_NE(ja["samples"][0]["tokens"], c["samples"][0]["tokens"]);
  fs::remove_all(dir);
}

TEST(Cli, BadCheckpointsGiveOneLineErrors) {
  std::string dir = testing_util::fresh_temp_dir("cli_bad");
  expect_input_error({"generate", "--ckpt", dir + "/missing", "--prompt", "1+1="}, "not found");
  ASSERT_EQ(run_streamrl({"init", "--model-config", kTinyModel, "--out", dir + "/ck"}).exit_code,
            0);
  // Truncated weights file.
  fs::resize_file(dir + "/ck/model.safetensors", 100);
  expect_input_error({"generate", "--ckpt", dir + "/ck", "--prompt", "1+1="}, "model.safetensors");
  // Header that is not JSON.
  {
    std::ofstream f(dir + "/ck/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = 8;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "notjson!";
  }
  expect_input_error({"generate", "--ckpt", dir + "/ck", "--prompt", "1+1="}, "JSON");
  expect_input_error({"init", "--model-config", dir + "/nope.json", "--out", dir + "/x"},
                     "nope.json");
  fs::remove_all(dir);
}

// The agentic task end to end through the CLI: SFT on its tool-calling demonstrations (120 steps:
// the tiny model learns the call format, about one call per problem, not yet the answers), eval
// with multi-turn tool rollouts, bench workflow, and RL over multi-turn rollouts in a colocated and
// a streamed run (the tool results in the context, out of the loss), also with a `streamrl serve`
// instance generating.
TEST(Cli, AgenticTaskSftsEvaluatesAndTrainsWithTools) {
  const std::string dir = testing_util::fresh_temp_dir("cli_agentic");
  auto r =
      run_streamrl({"sft", "--config", testing_util::write_tiny_sft_config(dir), "data.task=calc",
                    "train.steps=120", "train.batch_size=16", "train.micro_batch_tokens=4096",
                    "train.optim.lr=0.01", "train.optim.warmup_steps=10"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = dir + "/runs/sft/final";
  r = run_streamrl({"eval", "--ckpt", ckpt, "--task", "calc", "--n", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;  // the default cap is clamped to the model's length
  const auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_EQ(j["task"], "calc");
  EXPECT_GT(j["tool_calls_per_problem"].get<double>(), 0.0) << j.dump();
  EXPECT_EQ(j["n"], 8);
  // The same rollouts three ways (the bench's quick mode).
  r = run_streamrl({"bench", "workflow", "--quick", "--json", "--ckpt", ckpt});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto w = nlohmann::json::parse(last_line(r.output));
  EXPECT_TRUE(w["latency_speedup"]["p50"].is_number()) << w.dump();
  EXPECT_TRUE(w["throughput_speedup"].is_number());
  EXPECT_TRUE(w["same_trajectories"].is_number());

  std::ofstream(dir + "/rl.yaml")
      << "run: {dir: " << dir << "/runs, threads: 1, seed: 1}\n"
      << "policy: {init_from: " << ckpt << "}\n"
      << "data: {task: calc}\n"
      << "rollout: {prompts_per_iteration: 4, group_size: 4, max_new_tokens: 128, max_turns: 4}\n"
      << "train: {iterations: 2, optim: {lr: 0.001}}\n"
      << "algo: {kl: {coef: 0.01, placement: reward}}\n"
      << "eval: {every: 0, n: 4, max_new_tokens: 128}\ncheckpoint: {every: 0}\n";
  for (const std::string mode : {"colocate", "stream"}) {
    r = run_streamrl(
        {"train", "--config", dir + "/rl.yaml", "mode=" + mode, "run.name=rl_" + mode, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    double turns = 0, calls = 0;
    int iterations = 0;
    std::ifstream metrics(dir + "/runs/rl_" + mode + "/metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto m = nlohmann::json::parse(line);
      if (!m.contains("reward_mean")) continue;
      ++iterations;
      ASSERT_TRUE(m.contains("tools")) << m.dump();
      turns += m["tools"]["turns_per_sample"].get<double>();
      calls += m["tools"]["calls_per_sample"].get<double>();
      EXPECT_TRUE(std::isfinite(m["loss"].get<double>())) << m.dump();
      EXPECT_GT(m["response_length"]["max"].get<double>(), 128) << "no trajectory beyond one turn";
    }
    EXPECT_EQ(iterations, 2) << mode;
    EXPECT_GT(turns / iterations, 1.0) << mode << ": no rollout took a second turn";
    EXPECT_GT(calls / iterations, 0.0) << mode;
    std::cout << "[agentic] " << mode << ": " << turns / iterations << " turns and "
              << calls / iterations << " tool calls per sample\n";
  }
  // A `streamrl serve` instance runs the same rollouts when a remote trainer asks for them.
  testing_util::ServeProcess serve(ckpt);
  const std::string url = serve.wait_for_url();
  ASSERT_FALSE(url.empty());
  r = run_streamrl({"train", "--config", dir + "/rl.yaml", "mode=stream", "run.name=rl_remote",
                    "sgs.urls=[" + url + "]", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double remote_turns = 0;
  std::ifstream remote_metrics(dir + "/runs/rl_remote/metrics.jsonl");
  for (std::string line; std::getline(remote_metrics, line);) {
    const auto m = nlohmann::json::parse(line);
    if (!m.contains("tools")) continue;
    remote_turns = std::max(remote_turns, m["tools"]["turns_per_sample"].get<double>());
  }
  EXPECT_GT(remote_turns, 1.0) << "the serve instance ran one-turn rollouts";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl
