// `streamrl sft` under `streamrl launch`: pipeline stages (parallel.pp) with the per-batch
// dynamic schedule or static 1F1B, and data-parallel replicas of them, follow the loss and
// gradient-norm curve of one process step for step, expert parallelism (parallel.ep) that of the
// same ranks without it, and only rank 0 writes the run.
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

void run_ranks(const std::string& dir, const std::string& name, int ranks,
               const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "launch",   "--nproc",         std::to_string(ranks), "--timeout",        "120", "--", "sft",
      "--config", dir + "/sft.yaml", "run.name=" + name,    "train.log_every=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_streamrl(args, 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// Runs `name` on `ranks` ranks and checks that its loss and gradient norm follow run `baseline`
// step for step (and, with `schedule`, that each step ran under that pipeline schedule).
void expect_same_curve(const std::string& dir, const std::string& name, int ranks,
                       const std::vector<std::string>& extra, const std::string& schedule,
                       const std::string& baseline = "one") {
  ASSERT_NO_FATAL_FAILURE(run_ranks(dir, name, ranks, extra));
  const auto one = metrics(dir + "/runs/" + baseline), piped = metrics(dir + "/runs/" + name);
  ASSERT_EQ(piped.size(), one.size()) << "rank 0 alone writes the metrics";
  for (size_t i = 0; i < one.size(); ++i) {
    for (const char* key : {"loss", "final_eval_loss"}) {
      if (!one[i].contains(key)) continue;
      EXPECT_NEAR(piped[i][key].get<double>(), one[i][key].get<double>(), 1e-5) << key << i;
    }
    if (!one[i].contains("grad_norm")) continue;
    EXPECT_NEAR(piped[i]["grad_norm"].get<double>(), one[i]["grad_norm"].get<double>(), 1e-4) << i;
    if (schedule.empty()) continue;
    const nlohmann::json& pipe = piped[i]["pipeline"];
    EXPECT_GT(pipe["planned_step_s"].get<double>(), 0) << pipe.dump();
    EXPECT_GT(pipe["predicted_step_s"].get<double>(), 0) << pipe.dump();
    EXPECT_GT(pipe["step_s"].get<double>(), 0) << pipe.dump();
    // The dynamic planner may pick the static order among its candidates (it does once the
    // measured per-op cost of a tiny model favours few micro-batches); 1f1b never plans.
    if (schedule == "1f1b") {
      EXPECT_EQ(pipe["schedule"], "1f1b") << pipe.dump();
      EXPECT_EQ(pipe["plan"], "") << pipe.dump();
      EXPECT_FALSE(pipe["planned_ahead"].get<bool>());
    } else {
      EXPECT_NE(pipe["plan"], "") << pipe.dump();
      // Every step after the first was planned while the one before it trained.
      EXPECT_EQ(pipe["planned_ahead"].get<bool>(), piped[i]["step"].get<int>() > 1) << pipe.dump();
    }
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
  // Layers cut by the model's shape instead of their timed cost: the same update either way.
  expect_same_curve(dir, "pp2_flops", 2,
                    {"train.steps=4", "parallel.pp=2", "parallel.pp_partition=flops"}, "dynamic");
}

// The tiny MoE with router losses on, 3 steps of 8 sequences.
void write_moe_sft_config(const std::string& dir) {
  std::ofstream(dir + "/sft.yaml")
      << "run: {dir: " << dir << "/runs, name: sft, threads: 1}\n"
      << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_moe.json,\n"
      << "        moe: {aux_loss_coef: 0.01, z_loss_coef: 0.001}}\n"
      << "train: {steps: 3, batch_size: 8, micro_batch_tokens: 96, optim: {lr: 0.003}}\n"
      << "eval: {n: 0, loss_n: 8}\ncheckpoint: {every: 0}\n";
}

// Expert parallelism: EP = 2 on 2 ranks and DP = 2 x EP = 2 on 4 follow the same ranks without
// it step for step, router losses included, and the experts gathered into the final model score
// the held-out set alike.
TEST(SftExpertParallel, ShardedExpertsFollowTheSameRanksWithoutThem) {
  const std::string dir = testing_util::fresh_temp_dir("sft_expert_parallel");
  write_moe_sft_config(dir);
  ASSERT_NO_FATAL_FAILURE(run_ranks(dir, "dp2", 2, {}));
  const auto dp2 = metrics(dir + "/runs/dp2");
  ASSERT_FALSE(dp2.empty());
  EXPECT_TRUE(dp2[0].contains("moe")) << "router losses and stats under data parallelism";
  expect_same_curve(dir, "ep2", 2, {"parallel.ep=2"}, "", "dp2");
  ASSERT_NO_FATAL_FAILURE(run_ranks(dir, "dp4", 4, {}));
  // With Lina's pipelining (each all-to-all in 2 token chunks) the curve is the same.
  expect_same_curve(dir, "dp2_ep2", 4, {"parallel.ep=2", "parallel.ep_chunks=2"}, "", "dp4");

  // Checkpoints keep each expert rank's optimizer state: with its last checkpoint and final model
  // gone, a rerun resumes from step 2 and ends where the uninterrupted run did (the final eval
  // loss follows step 3's update, which reads the restored moments).
  const std::vector<std::string> ckpt = {"parallel.ep=2", "checkpoint.every=2", "checkpoint.keep=4",
                                         "run.resume=true"};
  const auto interrupted_and_resumed = [&](const std::string& name, int ranks,
                                           const std::string& baseline) {
    ASSERT_NO_FATAL_FAILURE(run_ranks(dir, name, ranks, ckpt));
    const std::string run = dir + "/runs/" + name;
    for (const char* f : {"optimizer_ep0.pt", "optimizer_ep1.pt", "model.safetensors"}) {
      EXPECT_TRUE(fs::exists(run + "/checkpoints/step_2/" + f)) << f;
    }
    fs::remove_all(run + "/checkpoints/step_3");
    fs::remove_all(run + "/final");
    expect_same_curve(dir, name, ranks, ckpt, "", baseline);
  };
  interrupted_and_resumed("ep2_resume", 2, "dp2");
  // Ranks 0 and 2 hold expert rank 0's state, 1 and 3 expert rank 1's: each gets its own.
  interrupted_and_resumed("dp2_ep2_resume", 4, "dp4");
  const std::string run = dir + "/runs/ep2_resume";
  // Another expert parallelism cannot continue those optimizer files: one line, nothing trained.
  fs::remove_all(run + "/checkpoints/step_3");
  auto r = run_streamrl(
      {"sft", "--config", dir + "/sft.yaml", "run.name=ep2_resume", "run.resume=true"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("was written with parallel.ep = 2"), std::string::npos) << r.output;
}

// An MoE model in two pipeline stages (one MoE layer each) with router losses on: one micro-batch
// per step, so one process scoring the whole batch at once is the reference. The loss, gradient
// norm and router statistics (gathered from both stages) follow it step for step.
TEST(SftPipeline, MoeStagesFollowOneProcess) {
  const std::string dir = testing_util::fresh_temp_dir("sft_pipeline_moe");
  write_moe_sft_config(dir);
  const std::vector<std::string> router = {"model.moe.aux_loss_coef=0.05",
                                           "model.moe.z_loss_coef=0.01"};
  std::vector<std::string> one = {
      "sft",          "--config",          dir + "/sft.yaml",
      "run.name=one", "train.log_every=1", "train.micro_batch_tokens=100000"};
  one.insert(one.end(), router.begin(), router.end());
  auto r = run_streamrl(one);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> pp = {"parallel.pp=2", "parallel.pp_schedule=1f1b",
                                 "parallel.pp_micro_batches=1"};
  pp.insert(pp.end(), router.begin(), router.end());
  expect_same_curve(dir, "pp2", 2, pp, "1f1b");
  const auto single = metrics(dir + "/runs/one"), piped = metrics(dir + "/runs/pp2");
  int steps = 0;
  for (size_t i = 0; i < single.size() && i < piped.size(); ++i) {
    if (!single[i].contains("moe")) continue;
    ++steps;
    const nlohmann::json &a = single[i]["moe"], &b = piped[i]["moe"];
    for (const char* key : {"aux_loss", "z_loss"}) {
      EXPECT_NEAR(b[key].get<double>(), a[key].get<double>(), 1e-5) << key << " " << b.dump();
    }
    for (const char* key : {"two_expert_share", "expert_load"}) {
      ASSERT_EQ(b[key].size(), 2u) << "both stages' layers: " << b.dump();
      for (size_t l = 0; l < 2; ++l) {
        EXPECT_NEAR(b[key][l].get<double>(), a[key][l].get<double>(), 1e-6) << key << b.dump();
      }
    }
  }
  EXPECT_EQ(steps, 3);
}

TEST(SftPipeline, BadParallelConfigIsOneLine) {
  const std::string dir = testing_util::fresh_temp_dir("sft_pipeline_bad");
  testing_util::write_tiny_sft_config(dir);
  auto r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.pp_schedule=gpipe"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.pp_schedule must be dynamic or 1f1b"), std::string::npos)
      << r.output;
  r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.pp_partition=count"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.pp_partition must be measured or flops, got 'count'"),
            std::string::npos)
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
  // Expert parallelism needs an MoE model and ranks to put the experts on.
  r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.ep=2"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.ep needs an MoE model"), std::string::npos) << r.output;
  r = run_streamrl({"sft", "--config", dir + "/sft.yaml", "parallel.ep=2",
                    std::string("model.config=") + STREAMRL_TEST_DATA_DIR + "/tiny_moe.json"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.ep = 2 does not divide the 1 ranks (run under streamrl launch"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace streamrl
