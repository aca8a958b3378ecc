#include "streamrl/planner/cost_model.h"

#include <gtest/gtest.h>

#include <fstream>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/planner/plan.h"
#include "streamrl/planner/workload.h"

namespace streamrl::planner {
namespace {

TEST(PtlTable, InterpolatesInBatchAndContext) {
  const nlohmann::json j = {{"ptl",
                             {{{"batch_size", 1}, {"context", 100}, {"step_seconds", 0.01}},
                              {{"batch_size", 9}, {"context", 100}, {"step_seconds", 0.02}},
                              {{"batch_size", 1}, {"context", 300}, {"step_seconds", 0.02}},
                              {{"batch_size", 9}, {"context", 300}, {"step_seconds", 0.04}}}},
                            {"prefill_tokens_per_s", 5000},
                            {"threads", 1}};
  PtlTable t = PtlTable::from_json(j);
  EXPECT_DOUBLE_EQ(t.step_seconds(5, 100), 0.015);
  EXPECT_DOUBLE_EQ(t.step_seconds(5, 200), 0.0225);
  EXPECT_DOUBLE_EQ(t.step_seconds(1, 50), 0.01);    // below the smallest context: clamped
  EXPECT_DOUBLE_EQ(t.step_seconds(1, 500), 0.03);   // above the largest: linear extrapolation
  EXPECT_DOUBLE_EQ(t.step_seconds(17, 100), 0.03);  // above the largest batch: extrapolated
  EXPECT_EQ(t.max_batch(), 9);
  EXPECT_DOUBLE_EQ(t.prefill_tokens_per_s(), 5000);
  EXPECT_THROW(PtlTable::from_json({{"ptl", nlohmann::json::array()}}), InputError);
  EXPECT_THROW(PtlTable::from_json({{"points", 1}}), InputError);
}

TEST(Roofline, ReproducesThePapersH800DecodeProfile) {
  // Fig. 6 (right): PTL(BS) of Qwen2.5-7B on one H800 with vLLM, ms per token.
  const std::vector<std::pair<int, double>> paper = {{1, 8.3},    {8, 8.9},    {32, 10.2},
                                                     {128, 15.2}, {256, 21.2}, {512, 36.8}};
  const ModelShape shape = model_preset("qwen2.5-7b");
  InstanceModel m = roofline_instance(find_accelerator("H800"), shape, 1, Efficiency{}, 2000);
  for (const auto& [bs, ms] : paper) {
    EXPECT_NEAR(1e3 * m.step_seconds(bs, 1024), ms, 0.2 * ms) << "batch " << bs;
  }
  EXPECT_NEAR(shape.params() / 1e9, 7.6, 0.4);
}

TEST(Roofline, TensorParallelismFitsTheWeights) {
  const Accelerator& h800 = find_accelerator("h800");
  EXPECT_EQ(choose_tp(h800, model_preset("qwen2.5-7b")), 1);
  EXPECT_EQ(choose_tp(h800, model_preset("qwen2.5-32b")), 2);
  EXPECT_EQ(choose_tp(h800, model_preset("qwen2.5-72b")), 4);
  EXPECT_THROW(find_accelerator("TPU"), InputError);
  EXPECT_THROW(model_preset("llama-3"), InputError);
  // Training on twice the devices is twice as fast.
  const ModelShape s = model_preset("qwen2.5-7b");
  EXPECT_NEAR(roofline_trainer(h800, s, 16, {}, 18, 1000).tokens_per_s,
              2 * roofline_trainer(h800, s, 8, {}, 18, 1000).tokens_per_s, 1e-6);
}

TEST(Workload, CodemathShapeAndRecall) {
  const auto d = LengthDistribution::codemath(20000);
  EXPECT_EQ(d.max(), 20000);
  EXPECT_GT(d.quantile(0.5), 1000);
  EXPECT_LT(d.quantile(0.5), 5000);
  EXPECT_GT(d.quantile(0.95), 10000);  // the long plateau
  const auto half = LengthDistribution::codemath(10000);
  EXPECT_NEAR(half.mean() * 2, d.mean(), 0.01 * d.mean());  // scaled proportionally
  BatchSpec spec;
  spec.groups = 500;
  Batch oracle = draw_batch(d, spec, 1);
  oracle.check();
  EXPECT_DOUBLE_EQ(top_recall(oracle, 0.2), 1.0);
  spec.ranker_noise = 0.5;
  const double noisy = top_recall(draw_batch(d, spec, 1), 0.2);
  EXPECT_LT(noisy, 1.0);
  EXPECT_GT(noisy, 0.5);
  const auto e = LengthDistribution::empirical({5, 1, 5, 9});
  EXPECT_DOUBLE_EQ(e.mean(), 5.0);
  EXPECT_DOUBLE_EQ(e.quantile(0.5), 5.0);
  EXPECT_THROW(LengthDistribution::empirical({}), InputError);
}

TEST(Plan, SmallScenarioEndToEnd) {
  const std::string yaml = R"(
model: qwen2.5-7b
devices: 16
unit: 4
max_output: 2000
workload: {prompts: 64, ranker_noise: 0.5}
emulator: {iterations: 3}
elastic: {iterations: 4, start_max_output: 1000, end_max_output: 4000, unit: 4}
heterogeneous: {gen_devices: 8, train_devices: 8, baseline_devices: 16}
)";
  core::Config cfg = core::Config::from_string(yaml);
  PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  const nlohmann::json p = run_plan(pc);
  const auto& sc = p["scenarios"][0];
  EXPECT_EQ(sc["allocation"]["gen"].get<int>() + sc["allocation"]["train"].get<int>() <= 16, true);
  for (const char* m : {"colocate", "disagg", "stream", "async"}) {
    EXPECT_GT(sc["modes"][m]["samples_per_s_steady"].get<double>(), 0) << m;
  }
  // Async hides the shorter stage, so it is never slower than stream on the same split.
  EXPECT_GE(sc["ratios"]["async_over_stream"].get<double>(), 0.99);
  EXPECT_EQ(p["elastic"]["steps"].size(), 4u);
  EXPECT_EQ(p["heterogeneous"]["rows"].size(), 1u);
  EXPECT_FALSE(format_plan(p).empty());
  EXPECT_THROW(PlanConfig::from_config(core::Config::from_string("model: qwen2.5-7b\ndevices: 1")),
               InputError);
  core::Config typo = core::Config::from_string("model: qwen2.5-7b\ndevice: 8");
  PlanConfig::from_config(typo);
  EXPECT_THROW(typo.check_all_used(), InputError);
}

TEST(Plan, MeasuredCoresOfThisMachine) {
  // One core decodes 4 sequences in 10 ms, 16 in 20 ms; the trainer does 2000 tokens/s per core.
  const nlohmann::json profile = {{"ptl",
                                   {{{"batch_size", 4}, {"context", 16}, {"step_seconds", 0.01}},
                                    {{"batch_size", 16}, {"context", 16}, {"step_seconds", 0.02}}}},
                                  {"prefill_tokens_per_s", 10000}};
  const std::string path = testing::TempDir() + "/planner_profile.json";
  std::ofstream(path) << profile.dump();
  core::Config cfg = core::Config::from_string(
      "model: qwen2.5-7b\ndevices: 6\nunit: 1\nmax_output: 100\n"
      "workload: {prompts: 16, group_size: 4, prompt_mean: 10}\n"
      "measured: {profile: " +
      path + ", train_tokens_per_s: 2000, max_batch: 16}\n");
  PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  const nlohmann::json p = run_plan(pc);
  const auto& sc = p["scenarios"][0];
  EXPECT_EQ(sc["tp"].get<int>(), 1);
  EXPECT_LE(sc["allocation"]["gen"].get<int>() + sc["allocation"]["train"].get<int>(), 6);
  EXPECT_GT(sc["modes"]["async"]["samples_per_s_steady"].get<double>(), 0);
  EXPECT_THROW(PlanConfig::from_config(core::Config::from_string(
                   "model: qwen2.5-7b\nmeasured: {profile: /nonexistent.json, "
                   "train_tokens_per_s: 1}\n")),
               InputError);
}

nlohmann::json plan_file(const std::string& name) {
  const std::string path = std::string(STREAMRL_TEST_DATA_DIR) + "/../../configs/plan/" + name;
  core::Config cfg = core::Config::from_file(path);
  PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  return run_plan(pc);
}

// The shipped paper scenarios stay valid and keep the paper's qualitative findings.
TEST(Plan, PaperScenarios) {
  for (const char* name : {"qwen32b_64xh800.yaml", "qwen72b_128xh800.yaml"}) {
    const nlohmann::json p = plan_file(name);
    const auto& last = p["scenarios"].back();  // 20K: generation gets the larger share (Fig. 10)
    EXPECT_EQ(last["max_output"].get<int>(), 20000);
    EXPECT_GT(last["allocation"]["gen"].get<int>(), last["allocation"]["train"].get<int>()) << name;
    for (const auto& sc : p["scenarios"]) {
      EXPECT_GT(sc["ratios"]["async_over_colocate"].get<double>(), 1.0) << name;
      EXPECT_LT(sc["ratios"]["disagg_over_colocate"].get<double>(), 1.0) << name;
      EXPECT_TRUE(sc.contains("paper_fig8"));
    }
  }
  const nlohmann::json h = plan_file("hetero_h20_h800.yaml");
  for (const auto& r : h["heterogeneous"]["rows"]) {
    EXPECT_GT(r["cost_effectiveness_ratio"].get<double>(), 1.0);  // Fig. 12: H20 generation pays
  }
  const nlohmann::json e = plan_file("elastic_7b.yaml");
  EXPECT_EQ(e["elastic"]["steps"].size(), 23u);
  plan_file("qwen7b_32xh800.yaml");
}

}  // namespace
}  // namespace streamrl::planner
