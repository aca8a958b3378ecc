#include "streamrl/rl/optim.h"

#include <gtest/gtest.h>

namespace streamrl::rl {
namespace {

TEST(Optim, WarmupThenCosineToFloor) {
  OptimConfig c;
  c.lr = 1.0;
  c.warmup_steps = 4;
  c.total_steps = 14;
  c.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 4), 1.0);
  EXPECT_NEAR(lr_at(c, 9), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through the cosine
  EXPECT_NEAR(lr_at(c, 14), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(c, 100), 0.1, 1e-12);
}

TEST(Optim, ClipGradNormScalesToMax) {
  torch::nn::Linear lin(2, 2);
  lin->weight.mutable_grad() = torch::full({2, 2}, 3.0);
  lin->bias.mutable_grad() = torch::full({2}, 4.0);
  const double norm = clip_grad_norm(*lin, 1.0);
  EXPECT_NEAR(norm, std::sqrt(4 * 9.0 + 2 * 16.0), 1e-9);
  double after = std::sqrt(lin->weight.grad().pow(2).sum().item<double>() +
                           lin->bias.grad().pow(2).sum().item<double>());
  EXPECT_NEAR(after, 1.0, 1e-5);
}

TEST(Optim, NoDecayOnVectors) {
  torch::nn::Linear lin(3, 2);
  OptimConfig c;
  c.weight_decay = 0.1;
  auto opt = make_adamw(*lin, c);
  ASSERT_EQ(opt->param_groups().size(), 2u);
  auto& g0 = static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[0].options());
  auto& g1 = static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[1].options());
  EXPECT_DOUBLE_EQ(g0.weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(g1.weight_decay(), 0.0);
  set_lr(*opt, 0.5);
  EXPECT_DOUBLE_EQ(g1.lr(), 0.5);
}

}  // namespace
}  // namespace streamrl::rl
