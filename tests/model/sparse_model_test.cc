// DSV sparse decoding wired into the model: with every block kept the cached path equals dense
// decoding; with few blocks it attends to fewer keys and differs; the predictors fit the model's
// own attention without touching its weights.
#include <gtest/gtest.h>

#include "../tiny_model.h"
#include "streamrl/core/errors.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/sparse_predictors.h"
#include "streamrl/model/transformer.h"

namespace streamrl::model {
namespace {

using torch::Tensor;

// Logits of a 2-row prefill of `prompt` tokens, then `steps` greedy decode steps.
std::vector<Tensor> prefill_and_decode(CausalLM& lm, int64_t prompt, int steps) {
  torch::NoGradGuard no_grad;
  KVCache cache(lm->config(), 2, prompt + steps + 1);
  torch::manual_seed(4);
  Tensor tokens = torch::randint(3, lm->config().vocab_size, {2, prompt}, torch::kLong);
  Tensor pos = torch::arange(prompt, torch::kLong).view({1, prompt}).expand({2, prompt});
  const Tensor slots = torch::tensor({0, 1}, torch::kLong);
  std::vector<Tensor> out;
  Tensor logits = lm->forward_cached(tokens, pos.contiguous(),
                                     torch::ones({2, prompt}, torch::kBool), slots, cache);
  out.push_back(logits);
  for (int s = 0; s < steps; ++s) {
    const Tensor next = logits.argmax(-1).view({2, 1});
    logits = lm->forward_cached(next, torch::full({2, 1}, prompt + s, torch::kLong),
                                torch::ones({2, 1}, torch::kBool), slots, cache);
    out.push_back(logits);
  }
  return out;
}

SparseAttentionConfig sparse_config(int64_t keep) {
  SparseAttentionConfig c;
  c.rank = 4;
  c.decode.block = 4;
  c.decode.keep = keep;
  c.decode.recent = 4;
  return c;
}

TEST(SparseModel, KeepingEveryBlockDecodesAsDense) {
  CausalLM dense = testing_util::tiny_model(3, 29, 128);
  CausalLM sparse = testing_util::tiny_model(3, 29, 128);
  // Contexts of 60-63 keys have exactly 14 blocks before the 4-key window: all 14 are gathered.
  sparse->enable_sparse_attention(sparse_config(/*keep=*/14));
  const auto a = prefill_and_decode(dense, 60, 3), b = prefill_and_decode(sparse, 60, 3);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-5) << "step " << i;
  }
}

TEST(SparseModel, FewBlocksChangeLongContextsOnly) {
  CausalLM dense = testing_util::tiny_model(3, 29, 128);
  CausalLM sparse = testing_util::tiny_model(3, 29, 128);
  sparse->enable_sparse_attention(sparse_config(/*keep=*/2));
  // 6 tokens: no more blocks than keep + window, so every key is attended.
  const auto short_a = prefill_and_decode(dense, 6, 0), short_b = prefill_and_decode(sparse, 6, 0);
  EXPECT_LT((short_a[0] - short_b[0]).abs().max().item<double>(), 1e-5);
  const auto a = prefill_and_decode(dense, 80, 3), b = prefill_and_decode(sparse, 80, 3);
  EXPECT_GT((a.back() - b.back()).abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::isfinite(b.back()).all().item<bool>());
}

TEST(SparseModel, CaptureHasEveryLayersInputs) {
  CausalLM lm = testing_util::tiny_model(3, 29, 128);
  const auto cap = lm->capture_attention(torch::randint(3, 29, {2, 10}, torch::kLong));
  ASSERT_EQ(cap.size(), 2u);
  EXPECT_EQ(cap[0].x.sizes(), (std::vector<int64_t>{2, 10, 32}));
  EXPECT_EQ(cap[1].q.sizes(), (std::vector<int64_t>{2, 10, 4, 8}));
  EXPECT_EQ(cap[1].k.sizes(), (std::vector<int64_t>{2, 10, 2, 8}));
  EXPECT_FALSE(cap[0].q.requires_grad());
}

TEST(SparseModel, FittingLowersThePredictorLossAndLeavesTheModel) {
  CausalLM lm = testing_util::tiny_model(3, 29, 128);
  CausalLM reference = testing_util::tiny_model(3, 29, 128);
  EXPECT_THROW(fit_sparse_predictors(lm, {torch::arange(3, 20)}), InputError);
  lm->enable_sparse_attention(sparse_config(2), 1);
  torch::manual_seed(8);
  std::vector<Tensor> seqs = {torch::randint(3, 29, {64}, torch::kLong),
                              torch::randint(3, 29, {64}, torch::kLong)};
  PredictorFitConfig fc;
  fc.steps = 80;
  fc.stride = 4;
  const PredictorFit fit = fit_sparse_predictors(lm, seqs, fc);
  ASSERT_EQ(fit.loss_first.size(), 2u);
  for (size_t l = 0; l < 2; ++l) EXPECT_LT(fit.loss_last[l], 0.7 * fit.loss_first[l]) << l;
  EXPECT_EQ(testing_util::max_param_diff(lm, reference), 0.0);
  EXPECT_EQ(lm->named_weights().size(), reference->named_weights().size());
  EXPECT_THROW(fit_sparse_predictors(lm, {torch::tensor({5}, torch::kLong)}), InputError);
}

}  // namespace
}  // namespace streamrl::model
