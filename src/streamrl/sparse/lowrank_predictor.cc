#include "streamrl/sparse/lowrank_predictor.h"

#include <limits>

namespace streamrl::sparse {
namespace {

// Sampled query positions and their real score rows [H, n, S]; keys after a query are `fill`.
std::pair<torch::Tensor, torch::Tensor> sampled_rows(const torch::Tensor& q, const torch::Tensor& k,
                                                     int64_t stride, double scale, float fill) {
  const int64_t S = q.size(1);
  const torch::Tensor pos = torch::arange(stride - 1, S, stride, q.options().dtype(torch::kLong));
  const torch::Tensor rows =
      torch::matmul(q.index_select(1, pos), k.transpose(1, 2)) * scale;  // [H, n, S]
  const torch::Tensor after = torch::arange(S, pos.options()).view({1, S}) > pos.view({-1, 1});
  return {pos, rows.masked_fill(after.unsqueeze(0), fill)};
}

}  // namespace

LowRankPredictorImpl::LowRankPredictorImpl(int64_t hidden, int64_t heads, int64_t rank,
                                           uint64_t seed)
    : heads_(heads), rank_(rank) {
  proj_ = register_module(
      "proj", torch::nn::Linear(torch::nn::LinearOptions(hidden, 2 * heads * rank).bias(false)));
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  proj_->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(hidden)), gen);
}

std::pair<torch::Tensor, torch::Tensor> LowRankPredictorImpl::forward(const torch::Tensor& x) {
  const int64_t S = x.size(0);
  const torch::Tensor y =
      proj_->forward(x.detach()).view({S, 2, heads_, rank_}).permute({1, 2, 0, 3});
  return {y[0], y[1]};
}

torch::Tensor predictor_loss(const torch::Tensor& q_lr, const torch::Tensor& k_lr,
                             const torch::Tensor& q, const torch::Tensor& k, int64_t stride) {
  const auto [pos, real] = sampled_rows(q.detach(), k.detach(), stride, 1.0, 0.0f);
  const auto [pos_lr, pred] = sampled_rows(q_lr, k_lr, stride, 1.0, 0.0f);
  // Masked keys are 0 in both rows, so they add nothing to either term.
  const torch::Tensor cos = torch::cosine_similarity(pred, real, -1, 1e-8);  // [H, n]
  const torch::Tensor mse = (torch::nn::functional::normalize(
                                 pred, torch::nn::functional::NormalizeFuncOptions().dim(-1)) -
                             torch::nn::functional::normalize(
                                 real, torch::nn::functional::NormalizeFuncOptions().dim(-1)))
                                .pow(2)
                                .sum(-1);
  return 0.9 * (1 - cos).mean() + 0.1 * mse.mean();
}

torch::Tensor head_sparsity(const torch::Tensor& q, const torch::Tensor& k, double scale,
                            double theta, int64_t stride) {
  torch::NoGradGuard no_grad;
  const auto [pos, rows] =
      sampled_rows(q, k, stride, scale, -std::numeric_limits<float>::infinity());
  const torch::Tensor p = std::get<0>(torch::softmax(rows, -1).sort(-1, /*descending=*/true));
  // Keys needed: those before the cumulative mass reaches theta, plus the one that crosses it.
  const torch::Tensor needed = (p.cumsum(-1) - p < theta).sum(-1).to(torch::kFloat32);  // [H, n]
  const torch::Tensor causal = (pos + 1).to(torch::kFloat32).view({1, -1});
  return (1 - needed / causal).mean(1);
}

torch::Tensor block_coverage(const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& blocks, int64_t block, double scale,
                             int64_t stride) {
  torch::NoGradGuard no_grad;
  const int64_t H = q.size(0), S = q.size(1), nb = blocks.size(1);
  const auto [pos, rows] =
      sampled_rows(q, k, stride, scale, -std::numeric_limits<float>::infinity());
  const torch::Tensor p = torch::softmax(rows, -1);  // [H, n, S]
  // Which key blocks each sampled query's block keeps: [H, n, nb] 0/1.
  const torch::Tensor chosen = blocks.to(torch::kLong).index_select(1, pos.div(block, "floor"));
  const torch::Tensor kept = torch::zeros({H, pos.size(0), nb}, p.options())
                                 .scatter_(2, chosen, 1.0)
                                 .repeat_interleave(block, 2)
                                 .narrow(2, 0, S);
  return (p * kept).sum(-1).mean(1);
}

}  // namespace streamrl::sparse
