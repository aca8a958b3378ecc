// Loss aggregation modes with a global denominator: hand values, masks, and the split invariance
// of value and gradients (spec §4, §7 invariant 6).
#include "streamrl/rl/loss_aggregation.h"
#include "tensor_expect.h"

#include <gtest/gtest.h>

#include <limits>

namespace streamrl::rl {
namespace {

using torch::indexing::Slice;

TEST(LossAggregation, HandValuesPerMode) {
  // Rows {1, 2, 3} and {4, 5, pad}; the padding holds NaN and must not leak.
  const torch::Tensor loss = torch::tensor({1.0, 2.0, 3.0, 4.0, 5.0, kNan}, kF64).reshape({2, 3});
  const torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0}).reshape({2, 3}).to(torch::kBool);
  const LossDenominator d = global_denominator({mask}, 4.0);
  EXPECT_EQ(d.tokens, 5);
  EXPECT_EQ(d.sequences, 2);
  EXPECT_EQ(d.t_const, 4);
  // token-mean: 15 / 5; seq-mean-token-mean: (6/3 + 9/2) / 2; sum-norm: 15 / (2 * 4).
  EXPECT_DOUBLE_EQ(aggregate(loss, mask, LossAggMode::kTokenMean, d).item<double>(), 3.0);
  EXPECT_DOUBLE_EQ(aggregate(loss, mask, LossAggMode::kSeqMeanTokenMean, d).item<double>(), 3.25);
  EXPECT_DOUBLE_EQ(aggregate(loss, mask, LossAggMode::kSeqMeanTokenSumNorm, d).item<double>(),
                   1.875);
  // A float 0/1 mask reads the same.
  EXPECT_DOUBLE_EQ(
      aggregate(loss, mask.to(torch::kFloat), LossAggMode::kTokenMean, d).item<double>(), 3.0);
}

TEST(LossAggregation, EmptyRowsAndPaddingCountNothing) {
  const torch::Tensor mask = torch::tensor({1, 1, 0, 0, 0, 0, 1, 0, 0}).reshape({3, 3});
  const LossDenominator d = global_denominator({mask}, 8.0);
  EXPECT_EQ(d.tokens, 3);
  EXPECT_EQ(d.sequences, 2);  // the empty middle row is not a sequence
  torch::Tensor loss = torch::full({3, 3}, 2.0, kF64).requires_grad_(true);
  for (LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                           LossAggMode::kSeqMeanTokenSumNorm}) {
    loss.mutable_grad() = torch::Tensor();
    aggregate(loss, mask, mode, d).backward();
    EXPECT_TRUE(torch::equal(loss.grad().masked_select(mask.eq(0)), torch::zeros({6}, kF64)))
        << name(mode);
  }
  EXPECT_DOUBLE_EQ(aggregate(loss, mask, LossAggMode::kSeqMeanTokenMean, d).item<double>(), 2.0);
}

TEST(LossAggregation, ZeroDenominatorOnlyForAnEmptyMicroBatch) {
  const LossDenominator empty;
  const torch::Tensor loss = torch::ones({2, 2}, kF64);
  EXPECT_EQ(aggregate(loss, torch::zeros({2, 2}), LossAggMode::kTokenMean, empty).item<double>(),
            0.0);
  EXPECT_THROW(aggregate(loss, torch::ones({2, 2}), LossAggMode::kTokenMean, empty), c10::Error);
  LossDenominator no_t = global_denominator({torch::ones({2, 2})}, 0.0);
  EXPECT_THROW(aggregate(loss, torch::ones({2, 2}), LossAggMode::kSeqMeanTokenSumNorm, no_t),
               c10::Error);
}

// Five sequences of lengths 6, 2, 4, 1, 3 (padded to 6), split into micro-batches whose padded
// widths are each micro-batch's own longest row: the summed losses and the gradients on the leaf
// must equal the whole batch's in every mode.
TEST(LossAggregation, SplitInvariantValueAndGradients) {
  const std::vector<int64_t> lengths = {6, 2, 4, 1, 3};
  torch::Tensor mask = torch::zeros({5, 6}, torch::kBool);
  for (int64_t i = 0; i < 5; ++i) mask.index_put_({i, Slice(0, lengths[i])}, true);
  torch::manual_seed(7);
  const torch::Tensor leaf_values = torch::randn({5, 6}, kF64);
  const std::vector<std::vector<int64_t>> splits = {{5}, {2, 3}, {1, 1, 3}};

  for (LossAggMode mode : {LossAggMode::kTokenMean, LossAggMode::kSeqMeanTokenMean,
                           LossAggMode::kSeqMeanTokenSumNorm}) {
    std::vector<double> totals;
    std::vector<torch::Tensor> grads;
    for (const auto& split : splits) {
      torch::Tensor leaf = leaf_values.clone().requires_grad_(true);
      std::vector<torch::Tensor> masks;
      std::vector<std::pair<int64_t, int64_t>> ranges;  // (first row, width)
      int64_t row = 0;
      for (int64_t n : split) {
        int64_t width = 0;
        for (int64_t i = row; i < row + n; ++i) width = std::max(width, lengths[i]);
        ranges.emplace_back(row, width);
        masks.push_back(mask.index({Slice(row, row + n), Slice(0, width)}));
        row += n;
      }
      const LossDenominator d = global_denominator(masks, 6.0);
      double total = 0;
      for (size_t k = 0; k < split.size(); ++k) {
        const auto [first, width] = ranges[k];
        const torch::Tensor per_token =
            leaf.index({Slice(first, first + split[k]), Slice(0, width)}).pow(2);
        const torch::Tensor part = aggregate(per_token, masks[k], mode, d);
        part.backward();
        total += part.item<double>();
      }
      totals.push_back(total);
      grads.push_back(leaf.grad());
    }
    for (size_t s = 1; s < splits.size(); ++s) {
      EXPECT_NEAR(totals[s], totals[0], 1e-12) << name(mode) << " split " << s;
      EXPECT_TRUE(torch::allclose(grads[s], grads[0], 0, 1e-12)) << name(mode) << " split " << s;
    }
  }
}

}  // namespace
}  // namespace streamrl::rl
