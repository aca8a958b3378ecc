// Issue 15's algorithm options: GSPO's sequence-level ratio (value, straight-through gradient,
// whole-sequence clipping, config rule) and DAPO's soft overlong penalty.
#include <gtest/gtest.h>

#include <cmath>

#include "streamrl/core/config.h"
#include "streamrl/core/errors.h"
#include "streamrl/rl/policy_loss.h"
#include "streamrl/rl/rl_config.h"
#include "tensor_expect.h"

namespace streamrl::rl {
namespace {

TEST(SequenceRatio, ValueIsTheGeometricMeanAndGradientIsStraightThrough) {
  // Row 0: log-ratios 0.1, -0.3 and a masked 5.0; row 1: 0.02, 0.04, 0.06.
  torch::Tensor logp =
      torch::tensor({{0.1, -0.3, 5.0}, {0.02, 0.04, 0.06}}, kF64).requires_grad_(true);
  const torch::Tensor old = torch::zeros({2, 3}, kF64);
  const torch::Tensor mask = torch::tensor({{1, 1, 0}, {1, 1, 1}}, torch::kBool);
  const torch::Tensor adv = torch::tensor({1.0, -2.0}, kF64);
  ClipOptions clip;  // 0.2 / 0.2: neither sequence is clipped
  const PpoTokenLoss out = ppo_clip_loss(logp, old, adv, mask, clip, PolicyRatio::kSequence);
  const double s0 = std::exp((0.1 - 0.3) / 2), s1 = std::exp(0.04);
  for (int t = 0; t < 2; ++t) EXPECT_NEAR(out.ratio[0][t].item<double>(), s0, 1e-12);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(out.ratio[1][t].item<double>(), s1, 1e-12);
  out.loss.sum().backward();
  // dL_t/dlogp_t = -A * s_i on the mask, 0 off it.
  const torch::Tensor g = logp.grad();
  EXPECT_NEAR(g[0][0].item<double>(), -1.0 * s0, 1e-12);
  EXPECT_NEAR(g[0][1].item<double>(), -1.0 * s0, 1e-12);
  EXPECT_EQ(g[0][2].item<double>(), 0.0);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(g[1][t].item<double>(), 2.0 * s1, 1e-12);
  EXPECT_EQ(out.clipped.sum().item<int64_t>(), 0);
}

TEST(SequenceRatio, ClipsWholeSequences) {
  // Per-token ratios 1.5 and 0.9 would clip one token at eps 0.2; the sequence ratio
  // exp(mean(log 1.5, log 0.9)) = 1.162 stays inside, and 1.3 everywhere clips every token.
  torch::Tensor logp =
      torch::tensor({{std::log(1.5), std::log(0.9)}, {std::log(1.3), std::log(1.3)}}, kF64)
          .requires_grad_(true);
  const torch::Tensor old = torch::zeros({2, 2}, kF64);
  const torch::Tensor mask = torch::ones({2, 2}, torch::kBool);
  const torch::Tensor adv = torch::tensor({1.0, 1.0}, kF64);
  const PpoTokenLoss tok = ppo_clip_loss(logp, old, adv, mask, ClipOptions{}, PolicyRatio::kToken);
  EXPECT_EQ(tok.clipped[0].sum().item<int64_t>(), 1);
  const PpoTokenLoss seq =
      ppo_clip_loss(logp, old, adv, mask, ClipOptions{}, PolicyRatio::kSequence);
  EXPECT_EQ(seq.clipped[0].sum().item<int64_t>(), 0);
  EXPECT_EQ(seq.clipped[1].sum().item<int64_t>(), 2);
}

TEST(SequenceRatio, ConfigNeedsSequenceMeanAggregation) {
  auto read = [](const std::vector<std::string>& overrides) {
    core::Config root = core::Config::from_string("rl: {}\n", overrides);
    RlLossConfig c;
    c.read(root.section("rl"));
    return c;
  };
  EXPECT_EQ(read({}).ratio, PolicyRatio::kToken);
  try {
    read({"rl.ratio=sequence"});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'rl.ratio'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read({"rl.ratio=sequence", "rl.loss_agg=seq-mean-token-mean"}).ratio,
            PolicyRatio::kSequence);
  EXPECT_THROW(read({"rl.ratio=tokens"}), InputError);
}

TEST(Overlong, SoftPenaltyRampsOverTheBuffer) {
  OverlongOptions o;
  EXPECT_EQ(overlong_penalty(400, 400, o), 0.0);  // buffer 0: off
  o.buffer = 100;
  EXPECT_EQ(overlong_penalty(250, 400, o), 0.0);
  EXPECT_EQ(overlong_penalty(300, 400, o), 0.0);
  EXPECT_DOUBLE_EQ(overlong_penalty(350, 400, o), 0.5);
  EXPECT_DOUBLE_EQ(overlong_penalty(400, 400, o), 1.0);
  o.penalty = 0.4;
  EXPECT_DOUBLE_EQ(overlong_penalty(375, 400, o), 0.3);
}

TEST(Overlong, ConfigKeys) {
  core::Config root =
      core::Config::from_string("rl: {overlong: {buffer: 32, penalty: 0.5, filter: true}}\n");
  OverlongOptions o;
  o.read(root.section("rl"));
  root.check_all_used();
  EXPECT_EQ(o.buffer, 32);
  EXPECT_EQ(o.penalty, 0.5);
  EXPECT_TRUE(o.filter);
  core::Config bad = core::Config::from_string("rl: {overlong: {penalty: -1}}\n");
  EXPECT_THROW(o.read(bad.section("rl")), InputError);
}

}  // namespace
}  // namespace streamrl::rl
