#include "streamrl/sparse/key_blocks.h"

#include <algorithm>
#include <limits>

namespace streamrl::sparse {

torch::Tensor select_key_blocks(const torch::Tensor& q_lr, const torch::Tensor& k_lr,
                                const KeyBlockConfig& config) {
  TORCH_CHECK(q_lr.dim() == 3 && k_lr.sizes() == q_lr.sizes(),
              "select_key_blocks: q_lr and k_lr must both be [H, S, r]");
  TORCH_CHECK(config.block > 0 && config.keep > 0 && config.recent >= 0,
              "select_key_blocks: block and keep must be > 0");
  torch::NoGradGuard no_grad;
  const int64_t H = q_lr.size(0), S = q_lr.size(1), r = q_lr.size(2), bs = config.block;
  const int64_t nb = (S + bs - 1) / bs, pad = nb * bs - S;
  const int64_t keep = std::min(config.keep, nb);
  auto padded = [&](const torch::Tensor& t, double value) {
    return pad == 0
               ? t.to(torch::kFloat32)
               : torch::cat({t.to(torch::kFloat32),
                             torch::full({H, pad, r}, value, t.options().dtype(torch::kFloat32))},
                            1);
  };
  // One proxy per query block: the mean of its real rows.
  const torch::Tensor counts =
      (torch::full({nb}, bs, torch::kFloat32) -
       torch::cat({torch::zeros({nb - 1}), torch::full({1}, static_cast<double>(pad))}))
          .to(q_lr.device());
  const torch::Tensor proxy = padded(q_lr, 0).view({H, nb, bs, r}).sum(2) / counts.view({1, nb, 1});
  // [H, nb, S] scores of each proxy against every key, then the max within each key block.
  torch::Tensor scores = torch::matmul(proxy, k_lr.to(torch::kFloat32).transpose(1, 2));
  if (pad > 0) {
    scores = torch::cat({scores, torch::full({H, nb, pad}, -std::numeric_limits<float>::infinity(),
                                             scores.options())},
                        2);
  }
  torch::Tensor block_scores = std::get<0>(scores.view({H, nb, nb, bs}).max(3));  // [H, nb, nb]
  // Forced blocks (diagonal and recent) and non-causal ones leave the competition.
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(q_lr.device());
  const torch::Tensor qi = torch::arange(nb, opts).view({nb, 1}),
                      kj = torch::arange(nb, opts).view({1, nb});
  const torch::Tensor forced = (kj <= qi) & (kj >= qi - config.recent);
  const torch::Tensor eligible = (kj < qi) & ~forced;
  block_scores =
      block_scores.masked_fill(~eligible.unsqueeze(0), -std::numeric_limits<float>::infinity());
  const int64_t free_slots =
      std::max<int64_t>(0, keep - std::min<int64_t>(keep, config.recent + 1));
  // [H, nb, keep]: diagonal, recent (clamped at 0: duplicates of the diagonal row 0 block), top-k.
  std::vector<torch::Tensor> parts;
  for (int64_t d = 0; d <= config.recent && d < keep; ++d) {
    parts.push_back((qi - d).clamp_min(0).view({1, nb, 1}).expand({H, nb, 1}));
  }
  if (free_slots > 0) {
    const auto [vals, idx] = block_scores.topk(free_slots, 2);
    // Fewer eligible blocks than slots: repeat the diagonal (masked out as a duplicate).
    parts.push_back(torch::where(torch::isinf(vals), qi.view({1, nb, 1}).expand_as(idx), idx));
  }
  return torch::cat(parts, 2).contiguous();
}

}  // namespace streamrl::sparse
