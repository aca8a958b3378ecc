// The streamrl binary end to end: exit codes and one-line errors for bad input, init/generate,
// and deterministic generation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

// The agentic task end to end through the CLI: SFT on its tool-calling demonstrations, eval with
// multi-turn tool rollouts (the figure exists; a 10-step model calls tools at random), and train
// refusing it with one line rather than scoring one-turn rollouts; bench workflow runs on it.
TEST(Cli, AgenticTaskSftsAndEvaluatesWithToolsAndTrainRefusesIt) {
  const std::string dir = testing_util::fresh_temp_dir("cli_agentic");
  auto r =
      run_streamrl({"sft", "--config", testing_util::write_tiny_sft_config(dir), "data.task=calc"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_streamrl({"eval", "--ckpt", dir + "/runs/sft/final", "--task", "calc", "--n", "4",
                    "--max-new-tokens", "40", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(last_line(r.output));
  EXPECT_EQ(j["task"], "calc");
  EXPECT_GE(j["tool_calls_per_problem"].get<double>(), 0.0);
  EXPECT_EQ(j["n"], 4);
  // The same rollouts three ways (the bench's quick mode).
  r = run_streamrl({"bench", "workflow", "--quick", "--json", "--ckpt", dir + "/runs/sft/final"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto w = nlohmann::json::parse(last_line(r.output));
  EXPECT_TRUE(w["latency_speedup"]["p50"].is_number()) << w.dump();
  EXPECT_TRUE(w["throughput_speedup"].is_number());
  EXPECT_TRUE(w["same_trajectories"].is_number());
  expect_input_error(
      {"train", "--config", std::string(STREAMRL_TEST_DATA_DIR) + "/../../configs/rl_sum.yaml",
       "data.task=calc", "policy.init_from=" + dir + "/runs/sft/final"},
      "needs multi-turn tool rollouts");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl
