// DSV-style sparse attention: with every causal block kept it is dense causal attention (values
// and gradients); block selection equals a brute-force reference; the low-rank predictor learns
// the real scores; the sparsity and coverage profiles agree with hand-computed cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "streamrl/core/errors.h"
#include "streamrl/sparse/block_sparse_attention.h"
#include "streamrl/sparse/key_blocks.h"
#include "streamrl/sparse/lowrank_predictor.h"
#include "streamrl/sparse/speedup_table.h"

namespace streamrl::sparse {
namespace {

using torch::Tensor;

// Every key block listed for every query block: the non-causal ones are masked by position.
Tensor all_blocks(int64_t H, int64_t nb) {
  return torch::arange(nb, torch::kLong).view({1, 1, nb}).expand({H, nb, nb}).contiguous();
}

// Query block i of head h in `got` [H, nb, keep] holds, as a set, the diagonal, the one recent
// block before it and the `free` best of the eligible candidates (score, block).
void expect_blocks(const Tensor& got, int64_t h, int64_t i,
                   std::vector<std::pair<double, int64_t>> cand, size_t free) {
  std::sort(cand.rbegin(), cand.rend());
  std::set<int64_t> expected = {i, std::max<int64_t>(0, i - 1)};
  for (size_t t = 0; t < cand.size() && t < free; ++t) expected.insert(cand[t].second);
  std::set<int64_t> actual;
  for (int64_t s = 0; s < got.size(2); ++s) actual.insert(got[h][i][s].item<int64_t>());
  EXPECT_EQ(actual, expected) << "head " << h << " block " << i;
}

TEST(BlockSparseAttention, AllBlocksEqualsDenseCausalValuesAndGradients) {
  torch::manual_seed(1);
  const int64_t H = 4, Hkv = 2, S = 70, hd = 8, block = 16;  // S not a multiple of the block
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
  Tensor q = torch::randn({H, S, hd}, opts), k = torch::randn({Hkv, S, hd}, opts),
         v = torch::randn({Hkv, S, hd}, opts);
  const Tensor g = torch::randn({H, S, hd}, torch::kDouble);
  const double scale = 0.4;
  const Tensor dense = dense_causal_attention(q, k, v, scale);
  const auto dense_grads = torch::autograd::grad({(dense * g).sum()}, {q, k, v});
  // Duplicated blocks in a row count once.
  Tensor blocks = torch::cat({all_blocks(H, 5), all_blocks(H, 5).narrow(2, 0, 2)}, 2);
  const Tensor sparse = block_sparse_attention(q, k, v, blocks, block, scale);
  const auto sparse_grads = torch::autograd::grad({(sparse * g).sum()}, {q, k, v});
  EXPECT_LT((sparse - dense).abs().max().item<double>(), 1e-12);
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT((sparse_grads[i] - dense_grads[i]).abs().max().item<double>(), 1e-12) << i;
  }
}

TEST(BlockSparseAttention, TiledKernelsEqualOneMatrixReference) {
  // Long enough that both kernels split the work into several tiles (16 MB of scores each).
  torch::manual_seed(5);
  const int64_t H = 2, S = 1500, hd = 4, block = 16;
  const auto opts = torch::TensorOptions().dtype(torch::kDouble).requires_grad(true);
  Tensor q = torch::randn({H, S, hd}, opts), k = torch::randn({1, S, hd}, opts),
         v = torch::randn({1, S, hd}, opts);
  const Tensor g = torch::randn({H, S, hd}, torch::kDouble);
  const Tensor future = torch::ones({S, S}, torch::kBool).triu(1);
  const Tensor ref = torch::matmul(
      torch::softmax((torch::matmul(q, k.transpose(1, 2)) * 0.5).masked_fill(future, -INFINITY),
                     -1),
      v);
  const auto ref_grads = torch::autograd::grad({(ref * g).sum()}, {q, k, v});
  for (const bool sparse : {false, true}) {
    SCOPED_TRACE(sparse ? "block-sparse, every block" : "dense");
    const Tensor out = sparse ? block_sparse_attention(q, k, v, all_blocks(H, 94), block, 0.5)
                              : dense_causal_attention(q, k, v, 0.5);
    const auto grads = torch::autograd::grad({(out * g).sum()}, {q, k, v});
    EXPECT_LT((out - ref).abs().max().item<double>(), 1e-10);
    for (int i = 0; i < 3; ++i)
      EXPECT_LT((grads[i] - ref_grads[i]).abs().max().item<double>(), 1e-9);
  }
}

TEST(BlockSparseAttention, KeptBlocksOnlyMatchAMaskedDenseReference) {
  torch::manual_seed(2);
  const int64_t H = 2, S = 64, hd = 4, block = 16;
  Tensor q = torch::randn({H, S, hd}, torch::kDouble), k = torch::randn({H, S, hd}, torch::kDouble),
         v = torch::randn({H, S, hd}, torch::kDouble);
  // Query block 3 keeps key blocks {3, 1}; others keep only their diagonal (listed twice).
  Tensor blocks = torch::arange(4, torch::kLong).view({1, 4, 1}).repeat({H, 1, 2});
  blocks.select(1, 3).select(1, 1).fill_(1);
  const Tensor out = block_sparse_attention(q, k, v, blocks, block, 1.0);
  Tensor allowed = torch::zeros({S, S}, torch::kBool);
  for (int64_t i = 0; i < S; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const int64_t bi = i / block, bj = j / block;
      allowed[i][j] = bj == bi || (bi == 3 && bj == 1);
    }
  }
  const Tensor scores = torch::matmul(q, k.transpose(1, 2)).masked_fill(~allowed, -INFINITY);
  const Tensor ref = torch::matmul(torch::softmax(scores, -1), v);
  EXPECT_LT((out - ref).abs().max().item<double>(), 1e-12);
}

TEST(KeyBlocks, SelectionEqualsBruteForce) {
  torch::manual_seed(3);
  const int64_t H = 3, S = 200, r = 6;  // 13 blocks of 16, the last one partial
  const Tensor q = torch::randn({H, S, r}), k = torch::randn({H, S, r});
  KeyBlockConfig c;
  c.block = 16;
  c.keep = 5;
  c.recent = 1;
  const Tensor got = select_key_blocks(q, k, c);
  const int64_t nb = 13;
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{H, nb, 5}));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t lo = i * c.block, hi = std::min(S, lo + c.block);
      const Tensor proxy = q[h].narrow(0, lo, hi - lo).mean(0);
      std::vector<std::pair<double, int64_t>> cand;  // (max score in block, block), eligible only
      for (int64_t j = 0; j + c.recent < i; ++j) {
        cand.emplace_back(
            torch::mv(k[h].narrow(0, j * c.block, c.block), proxy).max().item<float>(), j);
      }
      expect_blocks(got, h, i, cand, 3);
      EXPECT_EQ(got[h][i][0].item<int64_t>(), i);  // the diagonal first
    }
  }
}

// The mass-optimal choice: each query block's top blocks by the real softmax mass of its rows
// (brute force over the full [S, S] attention), and no selection covers more.
TEST(KeyBlocks, BestBlocksHoldTheMostMass) {
  torch::manual_seed(5);
  const int64_t H = 2, S = 150, d = 8;  // 10 blocks of 16, the last one partial
  const Tensor q = torch::randn({H, S, d}) * 2, k = torch::randn({H, S, d}) * 2;
  KeyBlockConfig c;
  c.block = 16;
  c.keep = 4;
  c.recent = 1;
  const double scale = 0.5;
  const Tensor got = best_key_blocks(q, k, c, scale);
  const int64_t nb = 10;
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{H, nb, 4}));
  const Tensor causal = torch::ones({S, S}, torch::kBool).tril();
  const Tensor p = torch::softmax(
      (torch::matmul(q, k.transpose(1, 2)) * scale).masked_fill(~causal, -INFINITY), -1);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t lo = i * c.block, hi = std::min(S, lo + c.block);
      std::vector<std::pair<double, int64_t>> cand;  // (block's mass over the query block's rows)
      for (int64_t j = 0; j + c.recent < i; ++j) {
        cand.emplace_back(
            p[h].narrow(0, lo, hi - lo).narrow(1, j * c.block, c.block).sum().item<double>(), j);
      }
      expect_blocks(got, h, i, cand, 2);
    }
  }
  // Over every row or every third (the rows block_coverage samples), no choice covers more.
  const Tensor rule_blocks = select_key_blocks(q, k, c);
  for (int64_t stride : {1, 3}) {
    const Tensor best =
        block_coverage(q, k, best_key_blocks(q, k, c, scale, stride), c.block, scale, stride);
    const Tensor rule = block_coverage(q, k, rule_blocks, c.block, scale, stride);
    const Tensor all = block_coverage(q, k, all_blocks(H, nb), c.block, scale, stride);
    EXPECT_TRUE((best >= rule - 1e-6).all().item<bool>()) << stride << best << rule;
    EXPECT_TRUE((best < all).all().item<bool>()) << stride << best;
  }
}

TEST(LowRankPredictor, LossFallsOnAFixedBatchAndNoGradientReachesTheModel) {
  torch::manual_seed(4);
  const int64_t S = 128, D = 32, H = 2, hd = 16;
  Tensor x = torch::randn({S, D}).requires_grad_(true);  // stands for the layer's input
  const Tensor wq = torch::randn({D, H * hd}) * 0.5, wk = torch::randn({D, H * hd}) * 0.5;
  const Tensor q = torch::matmul(x, wq).view({S, H, hd}).transpose(0, 1);
  const Tensor k = torch::matmul(x, wk).view({S, H, hd}).transpose(0, 1);
  LowRankPredictor pred(D, H, /*rank=*/8, /*seed=*/1);
  torch::optim::Adam opt(pred->parameters(), torch::optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    const auto [ql, kl] = pred->forward(x);
    const Tensor loss = predictor_loss(ql, kl, q, k, /*stride=*/4);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
  EXPECT_FALSE(x.grad().defined());
}

TEST(SparsityProfile, UniformAttentionAndFullCoverage) {
  const int64_t H = 2, S = 64;
  // q = 0: every causal key gets the same weight, so the critical set is ceil(0.9 * n) keys.
  const Tensor q = torch::zeros({H, S, 4}), k = torch::randn({H, S, 4});
  // Stride 7: no sampled query has 0.9 * keys integral, so rounding cannot move the count.
  const Tensor s = head_sparsity(q, k, 1.0, 0.9, /*stride=*/7);
  double expected = 0;
  int n = 0;
  for (int64_t p = 6; p < S; p += 7, ++n) {
    const double keys = p + 1;
    expected += 1 - std::ceil(0.9 * keys - 1e-9) / keys;
  }
  expected /= n;
  EXPECT_NEAR(s[0].item<double>(), expected, 1e-5);
  EXPECT_NEAR(s[1].item<double>(), expected, 1e-5);
  const Tensor cov = block_coverage(torch::randn({H, S, 4}), k, all_blocks(H, 4), 16, 1.0, 8);
  EXPECT_NEAR(cov.min().item<double>(), 1.0, 1e-5);
}

// The dispatcher's table: a row per doubling length with both kernels timed, and min_tokens where
// sparse stays faster at every longer measured length (past the longest when it never is).
TEST(SpeedupTable, MinTokensIsWhereSparseStaysFaster) {
  KeyBlockConfig config;
  config.block = 32;
  config.keep = 2;
  config.recent = 0;
  const SpeedupTable t =
      measure_speedup_table(4, 2, 16, 4, config, 512, torch::kCPU, /*repeats=*/1);
  ASSERT_EQ(t.rows.size(), 4u);  // 64, 128, 256, 512
  for (size_t i = 0; i < t.rows.size(); ++i) {
    EXPECT_EQ(t.rows[i].tokens, int64_t{64} << i);
    EXPECT_GT(t.rows[i].dense_s, 0);
    EXPECT_GT(t.rows[i].sparse_s, 0);
  }
  bool faster_after = true;
  int64_t want = 1024;
  for (auto it = t.rows.rbegin(); it != t.rows.rend(); ++it) {
    faster_after = faster_after && it->sparse_s < it->dense_s;
    if (faster_after) want = it->tokens;
  }
  EXPECT_EQ(t.min_tokens, want);
  EXPECT_EQ(t.to_json()["table"].size(), 4u);
  EXPECT_THROW(measure_speedup_table(3, 2, 16, 4, config, 512, torch::kCPU), InputError);
}

}  // namespace
}  // namespace streamrl::sparse
