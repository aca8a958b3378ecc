// An MoE policy (tests/data/tiny_moe.json, Qwen3-MoE layout, 8 experts) through the whole stack:
// SFT with adaptive gating and router losses, then stream-mode RL whose SGS engine routes the same
// way, its routing compared with the trainer's and, with routing replay, followed by it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;

TEST(MoeTrain, SftThenStreamRlWithAdaptiveGatingAndRouterLosses) {
  const std::string dir = testing_util::fresh_temp_dir("moe_train");
  std::ofstream(dir + "/sft.yaml")
      << "run: {dir: " << dir << "/runs, name: sft, threads: 1}\n"
      << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_moe.json,\n"
      << "        moe: {gating: adaptive, threshold: 0.2, aux_loss: top1, aux_loss_coef: 0.01,\n"
      << "              z_loss_coef: 0.001}}\n"
      << "train: {steps: 12, batch_size: 8, optim: {lr: 0.003}}\n"
      << "eval: {n: 0}\ncheckpoint: {every: 0}\n";
  auto sft = run_streamrl({"sft", "--config", dir + "/sft.yaml", "--json"});
  ASSERT_EQ(sft.exit_code, 0) << sft.output;
  const auto s = nlohmann::json::parse(last_line(sft.output));
  EXPECT_TRUE(std::isfinite(s["final_loss"].get<double>())) << s.dump();

  std::ofstream(dir + "/rl.yaml")
      << "run: {dir: " << dir << "/runs, name: rl, threads: 1, seed: 3}\n"
      << "mode: stream\n"
      << "policy: {init_from: " << dir << "/runs/sft/final}\n"
      << "model: {moe: {gating: adaptive, threshold: 0.2, aux_loss_coef: 0.01}}\n"
      << "rollout: {prompts_per_iteration: 3, group_size: 4, max_new_tokens: 24}\n"
      << "train: {iterations: 3, optim: {lr: 0.001}}\n"
      << "algo: {kl: {coef: 0.01}, overlong: {buffer: 16}}\n"
      << "eval: {every: 0, n: 0}\ncheckpoint: {every: 0}\n";
  auto rl = run_streamrl({"train", "--config", dir + "/rl.yaml", "--json"});
  ASSERT_EQ(rl.exit_code, 0) << rl.output;
  std::ifstream metrics(dir + "/runs/rl/metrics.jsonl");
  int iterations = 0;
  double grad = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("grad_norm")) continue;
    ++iterations;
    grad += j["grad_norm"].get<double>();
    // The local SGS records the engine's routing; the trainer compares its own with it.
    ASSERT_TRUE(j.contains("moe")) << j.dump();
    const double mismatch = j["moe"]["routing_mismatch"].get<double>();
    EXPECT_GE(mismatch, 0.0);
    EXPECT_LE(mismatch, 1.0);
    EXPECT_EQ(j["moe"]["two_expert_share"].size(), 2u);
  }
  EXPECT_EQ(iterations, 3);
  EXPECT_GT(grad, 0.0);

  // With routing replay the trainer follows the engine's experts.
  // (and, with algo.moe_curriculum, runs its micro-batches in the curriculum's order).
  auto replay = run_streamrl({"train", "--config", dir + "/rl.yaml", "run.name=replay",
                              "algo.moe_routing_replay=true", "algo.moe_curriculum=true",
                              "train.micro_batch_tokens=64"});
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  std::ifstream replay_metrics(dir + "/runs/replay/metrics.jsonl");
  int replayed = 0;
  for (std::string line; std::getline(replay_metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("moe")) continue;
    replayed += j["moe"]["routing_replay"].get<bool>();
    EXPECT_TRUE(j["moe"]["curriculum"].get<bool>());
    ASSERT_EQ(j["moe"]["expert_load"].size(), 2u) << j.dump();
    EXPECT_GE(j["moe"]["expert_load"][0].get<double>(), 1.0);  // busiest over mean
    EXPECT_GT(j["moe"]["aux_loss"].get<double>(), 0.0);
  }
  EXPECT_EQ(replayed, 3);
  auto report = run_streamrl({"report", "--run", dir + "/runs/replay"});
  ASSERT_EQ(report.exit_code, 0) << report.output;
  std::ifstream html(dir + "/runs/replay/report.html");
  const std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("Mixture of experts"), std::string::npos);
  EXPECT_NE(page.find("share of tokens on two experts"), std::string::npos);

  // A misspelt gating is one line naming the key.
  auto bad = run_streamrl({"train", "--config", dir + "/rl.yaml", "model.moe.gating=top3"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(last_line(bad.output).find("model.moe.gating"), std::string::npos) << bad.output;
}

// SFT epochs ordered by the routing curriculum: router statistics in metrics.jsonl, the observed
// complexities in the checkpoint, and a run resumed from a mid-run checkpoint ends where the
// uninterrupted one did (the curriculum's order depends on what the first epochs observed).
TEST(MoeTrain, SftCurriculumEpochsResumeToTheSameLoss) {
  namespace fs = std::filesystem;
  const std::string dir = testing_util::fresh_temp_dir("moe_curriculum");
  std::ofstream(dir + "/sft.yaml")
      << "run: {dir: " << dir << "/runs, name: full, threads: 1}\n"
      << "model: {config: " << STREAMRL_TEST_DATA_DIR << "/tiny_moe.json,\n"
      << "        moe: {gating: adaptive, threshold: 0.2}}\n"
      << "train: {steps: 12, batch_size: 4, epoch_size: 16, moe_curriculum: true, log_every: 1,\n"
      << "        optim: {lr: 0.003}}\n"
      << "eval: {n: 0, loss_n: 4, every: 6}\ncheckpoint: {every: 6, keep: 4}\n";
  auto full = run_streamrl({"sft", "--config", dir + "/sft.yaml", "--json"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const auto f = nlohmann::json::parse(last_line(full.output));
  EXPECT_GT(f["eval_loss"].get<double>(), 0.0) << f.dump();

  int steps = 0;
  std::ifstream metrics(dir + "/runs/full/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("moe")) continue;
    ++steps;
    EXPECT_EQ(j["moe"]["two_expert_share"].size(), 2u);
    EXPECT_GE(j["moe"]["expert_load"][1].get<double>(), 1.0);
    EXPECT_GT(j["train_seconds"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, 12);

  // The mid-run checkpoint holds the epoch's order and a complexity profile per problem.
  const fs::path mid = fs::path(dir) / "runs/full/checkpoints/step_6";
  std::ifstream state_file(mid / "trainer_state.json");
  const auto state = nlohmann::json::parse(state_file);
  const auto& order = state["data_order"];
  EXPECT_EQ(order["epoch"].get<int>(), 1);
  EXPECT_EQ(order["order"].size(), 16u);
  EXPECT_EQ(order["profiles"].size(), 16u);
  EXPECT_EQ(order["profiles"][0].size(), 2u);

  fs::create_directories(fs::path(dir) / "runs/resumed/checkpoints");
  fs::copy(mid, fs::path(dir) / "runs/resumed/checkpoints/step_6", fs::copy_options::recursive);
  auto resumed = run_streamrl(
      {"sft", "--config", dir + "/sft.yaml", "run.name=resumed", "run.resume=true", "--json"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto r = nlohmann::json::parse(last_line(resumed.output));
  EXPECT_EQ(r["resumed_from_step"].get<int>(), 6);
  // Same data in the same order, and an expert no token reached gets no update in either run
  // (rl::clear_grads): bit for bit the uninterrupted run's loss.
  EXPECT_EQ(r["final_loss"].get<double>(), f["final_loss"].get<double>());

  // The curriculum needs epochs and an MoE model: one line each.
  auto no_epochs =
      run_streamrl({"sft", "--config", dir + "/sft.yaml", "run.name=x", "train.epoch_size=0"});
  EXPECT_EQ(no_epochs.exit_code, 2);
  EXPECT_NE(last_line(no_epochs.output).find("train.epoch_size"), std::string::npos)
      << no_epochs.output;
  auto dense =
      run_streamrl({"sft", "--config", dir + "/sft.yaml", "run.name=y",
                    std::string("model.config=") + STREAMRL_TEST_DATA_DIR + "/tiny_model.json"});
  EXPECT_EQ(dense.exit_code, 2);
  EXPECT_NE(last_line(dense.output).find("MoE model"), std::string::npos) << dense.output;
}

}  // namespace
}  // namespace streamrl
