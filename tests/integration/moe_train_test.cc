// An MoE policy (tests/data/tiny_moe.json, Qwen3-MoE layout, 8 experts) through the whole stack:
// SFT with adaptive gating and router losses, then stream-mode RL whose SGS engine routes the same
// way, its routing compared with the trainer's and, with routing replay, followed by it.
#include <gtest/gtest.h>

#include <cmath>
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
  auto replay = run_streamrl(
      {"train", "--config", dir + "/rl.yaml", "run.name=replay", "algo.moe_routing_replay=true"});
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  std::ifstream replay_metrics(dir + "/runs/replay/metrics.jsonl");
  int replayed = 0;
  for (std::string line; std::getline(replay_metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("moe")) replayed += j["moe"]["routing_replay"].get<bool>();
  }
  EXPECT_EQ(replayed, 3);

  // A misspelt gating is one line naming the key.
  auto bad = run_streamrl({"train", "--config", dir + "/rl.yaml", "model.moe.gating=top3"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(last_line(bad.output).find("model.moe.gating"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace streamrl
