// The RL benchmarks end to end in quick mode on a tiny random checkpoint: each finishes and its
// last line is the JSON object with the keys the notes quote. The figures themselves are for
// `bench`, not for tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace streamrl {
namespace {
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::fresh_temp_dir("bench_cli");
    auto r = run_streamrl({"init", "--model-config",
                           std::string(STREAMRL_TEST_DATA_DIR) + "/tiny_model.json", "--tokenizer",
                           "char", "--out", dir_ + "/ck"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `streamrl bench NAME --quick --json` on the tiny checkpoint with a small rollout.
  nlohmann::json bench(const std::string& name) {
    auto r = run_streamrl({"bench", name, "--quick", "--json", "--ckpt", dir_ + "/ck", "--set",
                           "rollout.prompts_per_iteration=4", "--set", "rollout.group_size=2",
                           "--set", "rollout.max_new_tokens=12"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(last_line(r.output), nullptr, false);
  }

  std::string dir_;
};

TEST_F(BenchCli, RlModesReportsEveryModeAgainstColocate) {
  const nlohmann::json j = bench("rl_modes");
  ASSERT_TRUE(j.is_object());
  for (const char* m : {"disagg", "stream", "async"}) {
    EXPECT_TRUE(j["speedup"][m].is_number()) << m;
  }
  EXPECT_TRUE(j["colocate_train_over_disagg_train"].is_number());
  EXPECT_EQ(j["workloads"].size(), 2u);
}

// The online path measures the modes and predicts them in the same round.
TEST_F(BenchCli, EmulatorMeasuresAndPredictsInOneRun) {
  const nlohmann::json j = bench("emulator");
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["max_relative_error"].is_number());
  for (const char* m : {"colocate_1thread", "disagg", "stream", "async"}) {
    EXPECT_TRUE(j["modes"][m]["predicted_s"].is_number()) << m;
    EXPECT_TRUE(j["modes"][m]["measured_s"].is_number()) << m;
  }
  // Each mode is emulated at the batch it generated at: configs/rl_sum.yaml's colocated engine
  // runs rollout.max_batch_size (128), the SGS instances the default sgs.max_batch_size (64).
  EXPECT_EQ(j["workload"]["batch_per_mode"]["colocate_1thread"], 128);
  for (const char* m : {"disagg", "stream", "async"}) {
    EXPECT_EQ(j["workload"]["batch_per_mode"][m], 64) << m;
  }
}

// Each variant a fresh `streamrl train`, with glibc's malloc thresholds and with ours; a failing
// child would make the bench fail, not report a figure.
TEST_F(BenchCli, AllocatorComparesFreshProcesses) {
  const nlohmann::json j = bench("allocator");
  ASSERT_TRUE(j.is_object());
  for (const char* v : {"colocate_glibc", "colocate_tuned", "disagg_glibc", "disagg_tuned"}) {
    EXPECT_GT(j["train_s"][v]["median"].get<double>(), 0) << v;
  }
  EXPECT_TRUE(j["colocate_glibc_over_tuned"]["median"].is_number());
  EXPECT_TRUE(j["colocate_train_over_disagg_train"]["median"].is_number());
}

// Every gating variant trains from the same init for the same steps; the RL runs with and without
// routing replay report their routing mismatch and reward curves.
TEST_F(BenchCli, MoeComparesGatingVariantsAndRoutingReplay) {
  const nlohmann::json j = bench("moe");
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["adaptive_over_top2_speedup"].is_number());
  EXPECT_TRUE(j["eval_loss_delta"].is_number());
  EXPECT_EQ(j["two_expert_share"].size(), 4u);  // configs/model/tiny_moe.json's 4 MoE layers
  EXPECT_EQ(j["variants"].size(), 5u);
  EXPECT_DOUBLE_EQ(j["variants"]["top2"]["expert_flop_ratio"].get<double>(), 1.0);
  const double ratio = j["variants"]["adaptive_0.1"]["expert_flop_ratio"].get<double>();
  EXPECT_GE(ratio, 0.5);
  EXPECT_LE(ratio, 1.0);
  for (const char* v : {"replay", "no_replay"}) {
    EXPECT_TRUE(j["routing_mismatch"][v].is_number()) << v << " " << j["rl"].dump();
    EXPECT_EQ(j["rl"][v]["reward_curve"].size(), 2u) << v;
  }
}

// The popularity tables predict each MoE layer's load from the tokens' expert paths; both
// placements are timed on the same batches; training runs two expert-parallel ranks, both policies.
TEST_F(BenchCli, LinaPredictsPopularityAndTimesBothPlacements) {
  auto r = run_streamrl({"bench", "lina", "--quick", "--json"});  // trains its own tiny MoE
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(last_line(r.output), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["predictor"].size(), 3u);  // path lengths 1-3 over the tiny MoE's 4 layers
  const double acc = j["top2k_accuracy"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  EXPECT_GT(j["inference"]["static_ms"]["p95"]["median"].get<double>(), 0);
  EXPECT_GT(j["inference"]["lina_ms"]["p95"]["median"].get<double>(), 0);
  EXPECT_TRUE(j["p95_speedup"].is_number());
  EXPECT_GT(j["inference"]["busiest_rank_share"]["lina_p95"].get<double>(), 0);
  // Training: two launched expert-parallel ranks, fair share vs Lina, and the emulator's figures.
  EXPECT_GT(j["train_speedup"].get<double>(), 0);
  EXPECT_GT(j["a2a_speedup"].get<double>(), 0);
  EXPECT_GT(j["training"]["lina_step_ms"]["median"].get<double>(), 0);
  EXPECT_GT(j["training"]["emulated_lina_step_ms"]["median"].get<double>(), 0);
  EXPECT_TRUE(j["emulator_error_train"].is_number());
  EXPECT_GT(j["paper_scale"]["train_speedup"].get<double>(), 1.0);
}

// Dense and block-sparse attention are both timed at every length; the predictor learns (its loss
// falls) and the blocks it picks cover a share of the real attention mass.
TEST_F(BenchCli, SparseAttentionTimesBothKernelsAndThePredictorLearns) {
  auto r = run_streamrl({"bench", "sparse_attention", "--quick", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(last_line(r.output), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_LT(j["predictor_loss_last"].get<double>(), 0.5 * j["predictor_loss_first"].get<double>());
  ASSERT_EQ(j["lengths"].size(), 2u);
  for (const auto& [len, m] : j["lengths"].items()) {
    EXPECT_GT(m["dense_fwd_bwd_s"]["median"].get<double>(), 0) << len;
    EXPECT_GT(m["sparse_fwd_bwd_s"]["median"].get<double>(), 0) << len;
    EXPECT_TRUE(j["attn_speedup"][len].is_number()) << len;
    const double cov = m["critical_mass_coverage"].get<double>();
    EXPECT_GT(cov, 0.0) << len;
    EXPECT_LE(cov, 1.0 + 1e-6) << len;
  }
}

// Measured at PP = 2 with two real processes (the three variants each round, the emulator's error
// for each), and emulated: every config has the static and dynamic figures, the plan is never
// slower than the baseline in the emulator, and planning ahead hides planning time.
TEST_F(BenchCli, PipelineComparesStaticAndDynamicPlansAndPlansAhead) {
  auto r = run_streamrl({"bench", "pipeline", "--quick", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(last_line(r.output), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_TRUE(j["dynamic_speedup_median"].is_number());
  const nlohmann::json& m = j["measured_pp2"];
  EXPECT_EQ(m["stages"], 2);
  for (const char* v : {"static", "split_only", "dynamic"}) {
    const std::string k = v;
    EXPECT_EQ(m[k + "_step_s"]["values"].size(), 3u) << m.dump();
    EXPECT_GT(m[k + "_step_s"]["min"].get<double>(), 0) << k;
    EXPECT_GT(m[k + "_emulated_step_s"]["min"].get<double>(), 0) << k;
    // Round 1 predicted by the fitted profile, round 2 by it and the step calibration too.
    EXPECT_EQ(m[k + "_emulated_step_s"]["values"].size(), 2u) << k;
    EXPECT_EQ(m[k + "_calibrated_step_s"]["values"].size(), 1u) << k;
    EXPECT_GE(m["emulator_relative_error"][k]["min"].get<double>(), 0) << k;
    EXPECT_GE(m["emulator_relative_error_uncalibrated"][k]["min"].get<double>(), 0) << k;
    // Replaying a step's own op seconds leaves out only what runs between ops: never half of it.
    EXPECT_LT(m["emulator_relative_error_measured_ops"][k]["min"].get<double>(), 0.5) << k;
    EXPECT_GE(m[k + "_bubble_ratio"]["min"].get<double>(), 0) << k;
    EXPECT_LT(m[k + "_bubble_ratio"]["max"].get<double>(), 1) << k;
  }
  EXPECT_GT(j["dynamic_speedup_measured_pp2"].get<double>(), 0);
  EXPECT_GT(m["profile"]["link_gb_s"].get<double>(), 0);
  ASSERT_FALSE(j["configs"].empty());
  for (const auto& [key, c] : j["configs"].items()) {
    EXPECT_GE(j["dynamic_speedup"][key].get<double>(), 1.0 - 1e-9) << key;
    EXPECT_GE(c["dynamic_speedup"]["min"].get<double>(), 1.0 - 1e-9) << key;
    EXPECT_GT(c["static_step_s"]["median"].get<double>(), 0) << key;
    EXPECT_GT(c["dynamic_step_s"]["median"].get<double>(), 0) << key;
    for (const char* b : {"static_bubble_ratio", "dynamic_bubble_ratio"}) {
      EXPECT_GE(c[b]["min"].get<double>(), 0) << key << " " << b;
      EXPECT_LT(c[b]["max"].get<double>(), 1) << key << " " << b;
    }
    // The busiest stage idles no more than the stages on average.
    EXPECT_GE(c["dynamic_bottleneck_idle"]["min"].get<double>(), 0) << key;
    EXPECT_LE(c["dynamic_bottleneck_idle"]["max"].get<double>(),
              c["dynamic_bubble_ratio"]["max"].get<double>() + 1e-9)
        << key;
    EXPECT_GT(c["planner_wall_s"]["median"].get<double>(), 0) << key;
    const double hidden = c["plan_ahead"]["hidden_share"].get<double>();
    EXPECT_GE(hidden, 0) << key;
    EXPECT_LE(hidden, 1 + 1e-9) << key;
  }
  EXPECT_GT(j["workload"]["tokens"]["p50"].get<double>(), 100);
}

TEST_F(BenchCli, SetIsRefusedByBenchesWithoutARunConfig) {
  auto r = run_streamrl({"bench", "engine", "--quick", "--set", "mode=async"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(
      r.output.find("--set applies to bench allocator, emulator, learning, moe, rl_modes only"),
      std::string::npos)
      << r.output;
}

// A bad --set is the config's own one-line error (exit 2), before any mode runs.
TEST_F(BenchCli, BadOverrideIsTheConfigsError) {
  auto r = run_streamrl(
      {"bench", "rl_modes", "--quick", "--ckpt", dir_ + "/ck", "--set", "rollout.group_size=0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("group_size"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("run failed"), std::string::npos) << r.output;
}

TEST_F(BenchCli, MissingCheckpointNamesTheGivenDirectory) {
  auto r = run_streamrl({"bench", "rl_modes", "--quick", "--ckpt", dir_ + "/nothing"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ckpt " + dir_ + "/nothing is not a checkpoint"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace streamrl
