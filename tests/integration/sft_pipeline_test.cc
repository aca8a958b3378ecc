// `streamrl sft` under `streamrl launch`: pipeline stages (parallel.pp) with the per-batch
// dynamic schedule or static 1F1B, and data-parallel replicas of them, follow the loss and
// gradient-norm curve of one process step for step, and only rank 0 writes the run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::run_streamrl;
namespace fs = std::filesystem;

std::vector<nlohmann::json> metrics(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

void expect_same_curve(const std::string& dir, const std::string& name, int ranks,
                       const std::vector<std::string>& extra, const std::string& schedule) {
  std::vector<std::string> args = {
      "launch",   "--nproc",         std::to_string(ranks), "--timeout",        "120", "--", "sft",
      "--config", dir + "/sft.yaml", "run.name=" + name,    "train.log_every=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_streamrl(args, 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto one = metrics(dir + "/runs/one"), piped = metrics(dir + "/runs/" + name);
  ASSERT_EQ(piped.size(), one.size()) << "rank 0 alone writes the metrics";
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(piped[i]["loss"].get<double>(), one[i]["loss"].get<double>(), 1e-5) << i;
    EXPECT_NEAR(piped[i]["grad_norm"].get<double>(), one[i]["grad_norm"].get<double>(), 1e-4) << i;
    EXPECT_EQ(piped[i]["pipeline"]["schedule"], schedule) << piped[i].dump();
  }
  EXPECT_TRUE(fs::exists(dir + "/runs/" + name + "/final/model.safetensors"));
}

TEST(SftPipeline, StagesAndReplicasFollowOneProcess) {
  const std::string dir = testing_util::fresh_temp_dir("sft_pipeline");
  testing_util::write_tiny_sft_config(dir);
  auto r = run_streamrl(
      {"sft", "--config", dir + "/sft.yaml", "run.name=one", "train.steps=4", "train.log_every=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_curve(dir, "pp2", 2, {"train.steps=4", "parallel.pp=2"}, "dynamic");
  expect_same_curve(dir, "pp2_static", 2,
                    {"train.steps=4", "parallel.pp=2", "parallel.pp_schedule=1f1b"}, "1f1b");
  expect_same_curve(dir, "dp2_pp2", 4, {"train.steps=4", "parallel.pp=2"}, "dynamic");
}

TEST(SftPipeline, BadParallelConfigIsOneLine) {
  const std::string dir = testing_util::fresh_temp_dir("sft_pipeline_bad");
  testing_util::write_tiny_sft_config(dir);
  auto r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.pp_schedule=gpipe"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.pp_schedule must be dynamic or 1f1b"), std::string::npos)
      << r.output;
  // One process or three ranks cannot form replicas of two stages.
  r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.pp=2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("divide the 1 ranks (run under streamrl launch --nproc N"),
            std::string::npos)
      << r.output;
  r = run_streamrl({"launch", "--nproc", "3", "--timeout", "60", "--", "sft", "--config",
                    dir + "/sft.yaml", "parallel.pp=2"},
                   90);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parallel.pp = 2 must be >= 1 and divide the 3 ranks"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace streamrl
