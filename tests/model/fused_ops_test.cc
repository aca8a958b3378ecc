// The inference path's fused pieces equal what they replace: SwiGLU's kernel equals silu(g) * u,
// a fused projection equals its parts side by side and follows every change of their weights.
#include <gtest/gtest.h>

#include "streamrl/model/fused_linear.h"
#include "streamrl/model/swiglu.h"

namespace streamrl::model {
namespace {

TEST(Swiglu, EqualsSiluTimesUpIncludingExtremeGates) {
  torch::manual_seed(5);
  auto gu = torch::randn({3, 7, 2 * 45}) * 4;
  gu[0][0][0] = -1e4;  // exp(1e4) overflows: the result must be 0, not NaN
  gu[0][0][1] = 1e4;
  const auto g = gu.narrow(-1, 0, 45), u = gu.narrow(-1, 45, 45);
  const auto expected =
      (g.to(torch::kDouble) * torch::sigmoid(g.to(torch::kDouble))) * u.to(torch::kDouble);
  const auto got = swiglu(gu);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{3, 7, 45}));
  EXPECT_TRUE(torch::isfinite(got).all().item<bool>());
  EXPECT_TRUE(torch::allclose(got.to(torch::kDouble), expected, 1e-5, 1e-4));
  // Other dtypes take libtorch's ops.
  EXPECT_TRUE(torch::allclose(swiglu(gu.to(torch::kDouble)), expected, 1e-9, 1e-9));
}

TEST(FusedLinear, EqualsItsPartsAndFollowsWeightChanges) {
  torch::manual_seed(6);
  torch::nn::Linear a(torch::nn::LinearOptions(16, 8).bias(true));
  torch::nn::Linear b(torch::nn::LinearOptions(16, 4).bias(false));
  FusedLinear fused({a, b});
  torch::NoGradGuard no_grad;
  auto x = torch::randn({5, 16});
  auto separate = [&] { return torch::cat({a->forward(x), b->forward(x)}, -1); };
  EXPECT_TRUE(torch::allclose(fused.forward(x), separate(), 1e-6, 1e-6));
  // An in-place update (an optimizer step, a weight push) is seen on the next call.
  b->weight.add_(1.0);
  EXPECT_TRUE(torch::allclose(fused.forward(x), separate(), 1e-6, 1e-6));
  a->bias.copy_(torch::randn({8}));
  EXPECT_TRUE(torch::allclose(fused.forward(x), separate(), 1e-6, 1e-6));
  // So is a weight replaced by another tensor.
  a->weight.set_data(torch::randn({8, 16}));
  EXPECT_TRUE(torch::allclose(fused.forward(x), separate(), 1e-6, 1e-6));
}

}  // namespace
}  // namespace streamrl::model
