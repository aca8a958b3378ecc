// The expert-parallel MoE step at cluster scale: each layer's costs from the shape, the step
// under the three link policies, and the `lina` plan section.
#include "streamrl/planner/moe_step.h"

#include <gtest/gtest.h>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/planner/plan.h"

namespace streamrl::planner {
namespace {

TEST(MoeStep, LayerCostsFollowTheShape) {
  MoeStepSpec s;  // GPT-2 MoE, 16 experts on 16 A100s
  const std::vector<BackwardLayer> layers = moe_backward_layers(s);
  ASSERT_EQ(layers.size(), 12u);
  const BackwardLayer& l = layers[0];
  EXPECT_EQ(l.tokens, 2 * 8192);  // top-2 copies of every token
  // fp16 hidden states; 15 of 16 copies leave the device.
  EXPECT_EQ(l.bytes_per_token, 768 * 2 * 15 / 16);
  // Attention weights (and two norms) in fp16 through a 16-rank ring: 2 * 15/16 of them.
  EXPECT_EQ(l.gradient_bytes, static_cast<int64_t>((4.0 * 768 * 768 + 2 * 768) * 2 * 2 * 15 / 16));
  EXPECT_EQ(l.expert_gradient_bytes, 0);  // one expert per device: nothing to reduce
  // Expert FFN backward: 2 * 2 matmuls of 768 x 3072 per routed token at 40 % of 312 TFLOP/s.
  EXPECT_NEAR(l.expert_s, 2 * 8192.0 * 2 * 2 * 2 * 768 * 3072 / (312e12 * 0.4), 1e-12);

  s.devices = 32;  // two replicas of each expert: their gradients meet over a 2-rank ring
  EXPECT_EQ(moe_backward_layers(s)[0].expert_gradient_bytes, 2 * 768 * 3072 * 2);
}

TEST(MoeStep, LinaShortensTheStepAtThePapersScale) {
  const nlohmann::json p = project_lina(MoeStepSpec{});
  const auto& fair = p["policies"]["fair_share"];
  const auto& lina = p["policies"]["lina"];
  EXPECT_NEAR(p["train_speedup"].get<double>(),
              fair["step_s"].get<double>() / lina["step_s"].get<double>(), 1e-12);
  EXPECT_NEAR(p["a2a_speedup"].get<double>(),
              fair["all_to_all_s"].get<double>() / lina["all_to_all_s"].get<double>(), 1e-12);
  // The expert FFN pipelined with the chunks shortens the step; the chunks' launch latency
  // lengthens the exchange itself, the more the smaller they are (the sweep).
  EXPECT_GT(p["train_speedup"].get<double>(), 1.05);
  const auto& sweep = p["a2a_chunk_sweep"];
  ASSERT_GE(sweep.size(), 3u);
  EXPECT_LT(sweep[0]["a2a_speedup"].get<double>(), sweep[2]["a2a_speedup"].get<double>());
  std::printf("lina at the paper's scale: step %.2fx, all-to-all %.2fx\n",
              p["train_speedup"].get<double>(), p["a2a_speedup"].get<double>());
}

TEST(MoeStep, PlanSectionAloneAndBadValues) {
  core::Config cfg = core::Config::from_string(
      "lina: {devices: 8, experts: 16, link_gb_s: 3, accelerator: H100, tokens_per_device: 4096}");
  const PlanConfig pc = PlanConfig::from_config(cfg);
  cfg.check_all_used();
  const nlohmann::json p = run_plan(pc);
  EXPECT_FALSE(p.contains("scenarios"));
  EXPECT_EQ(p["lina"]["devices"].get<int>(), 8);
  EXPECT_EQ(p["lina"]["accelerator"].get<std::string>(), "H100");
  EXPECT_NE(format_plan(p).find("Lina over fair sharing"), std::string::npos);

  for (const char* bad : {"lina: {devices: 6, experts: 16}", "lina: {top_k: 17}",
                          "lina: {link_gb_s: 0}", "lina: {accelerator: Z80}"}) {
    EXPECT_THROW(PlanConfig::from_config(core::Config::from_string(bad)), InputError) << bad;
  }
}

}  // namespace
}  // namespace streamrl::planner
