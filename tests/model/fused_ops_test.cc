// The inference path's fused pieces equal what they replace: SwiGLU's kernel equals silu(g) * u,
// a fused projection equals its parts side by side and follows every change of their weights, and
// its packed GEMM equals libtorch's linear.
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

TEST(FusedLinear, PackedGemmEqualsLibtorchLinearOnEveryShape) {
  // Debian's libtorch has XNNPACK: there the packed path must be the one running.
  if (!FusedLinear::packs_weights()) GTEST_SKIP() << "libtorch without XNNPACK";
  torch::manual_seed(7);
  torch::nn::Linear one(torch::nn::LinearOptions(24, 40).bias(true));
  FusedLinear fused({one});
  torch::NoGradGuard no_grad;
  for (auto shape : std::vector<std::vector<int64_t>>{{1, 24}, {7, 24}, {3, 5, 24}, {0, 24}}) {
    auto x = torch::randn(shape);
    const auto packed = fused.forward(x);
    FusedLinear::set_packing(false);
    const auto unpacked = fused.forward(x);
    FusedLinear::set_packing(true);
    ASSERT_EQ(packed.sizes(), one->forward(x).sizes());
    EXPECT_TRUE(torch::allclose(packed, one->forward(x), 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(packed, unpacked, 1e-5, 1e-5));
  }
  // A non-contiguous input (a narrowed view, as the q/k/v split gives) packs a contiguous copy.
  auto wide = torch::randn({6, 48});
  const auto view = wide.narrow(1, 8, 24);
  EXPECT_TRUE(torch::allclose(fused.forward(view), one->forward(view), 1e-5, 1e-5));
  // Other dtypes take libtorch's linear.
  auto xd = torch::randn({4, 24}, torch::kDouble);
  one->to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(fused.forward(xd), one->forward(xd), 1e-12, 1e-12));
}

}  // namespace
}  // namespace streamrl::model
