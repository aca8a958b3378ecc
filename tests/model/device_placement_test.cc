// The model's device-generic pieces on the CPU: the generic cached attention (what CUDA runs)
// against the CPU kernel, and a model placed in bf16 against its fp32 self.
#include <gtest/gtest.h>

#include "../tiny_model.h"
#include "streamrl/model/decode_attention.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/transformer.h"

namespace streamrl::model {
namespace {

TEST(DevicePlacement, GenericCachedAttentionMatchesTheCpuKernel) {
  // Head sizes 32, 64 and 128 run the kernel's fixed-size copies, 8 its generic one; lengths past
  // 16 and not a multiple of it take the blocked path (AVX-512) and its tail.
  for (const int64_t hd : {8, 32, 64, 128}) {
    SCOPED_TRACE(hd);
    torch::manual_seed(3);
    const int64_t S = 3, Hkv = 2, H = 4, T = 48, N = 5;
    auto k = torch::randn({S, Hkv, T, hd}), v = torch::randn({S, Hkv, T, hd});
    auto q = torch::randn({N, H, hd});
    auto slots = torch::tensor({0, 2, 1, 2, 0}, torch::kLong);
    auto lens = torch::tensor({1, 16, 47, 33, 9}, torch::kLong);
    const torch::Tensor kernel = decode_attention(q, k, v, slots, lens, 0.35);
    // float64 is not the kernel's dtype, so this takes the generic path, computed exactly.
    const torch::Tensor generic =
        decode_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), slots,
                         lens, 0.35, /*max_len=*/47);
    EXPECT_LT((generic.to(torch::kFloat32) - kernel).abs().max().item<double>(), 1e-5);
    // Without max_len it reads lens.max() itself.
    const torch::Tensor again = decode_attention(q.to(torch::kDouble), k.to(torch::kDouble),
                                                 v.to(torch::kDouble), slots, lens, 0.35);
    EXPECT_TRUE(torch::equal(generic, again));
  }
}

TEST(DevicePlacement, Bf16WeightsScoreAndDecodeCloseToFp32) {
  const ModelConfig c = testing_util::tiny_model_config(41, 32, /*initializer_range=*/0);
  CausalLM fp32(c, 9), bf16(c, 9);
  bf16->place(torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(bf16->dtype(), torch::kBFloat16);
  EXPECT_EQ(bf16->options().dtype(), torch::kBFloat16);
  EXPECT_TRUE(bf16->device().is_cpu());
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(1, c.vocab_size, {2, 12}, torch::kLong);
  auto valid = torch::ones({2, 12}, torch::kBool);
  const auto a = fp32->score(tokens, valid).logprobs, b = bf16->score(tokens, valid).logprobs;
  EXPECT_EQ(b.scalar_type(), torch::kFloat32);  // log-prob maths in fp32 whatever the weights
  EXPECT_LT((a - b).abs().max().item<double>(), 5e-2);
  KVCache ca(c, 2, 16, fp32->options()), cb(c, 2, 16, bf16->options());
  EXPECT_EQ(cb.keys(0).scalar_type(), torch::kBFloat16);
  auto pos = torch::arange(12, torch::kLong).repeat({2, 1});
  auto slots = torch::arange(2, torch::kLong);
  const auto la = fp32->forward_cached(tokens, pos, valid, slots, ca);
  const auto lb = bf16->forward_cached(tokens, pos, valid, slots, cb);
  EXPECT_LT((la - lb.to(torch::kFloat32)).abs().max().item<double>(), 0.1);
}

}  // namespace
}  // namespace streamrl::model
