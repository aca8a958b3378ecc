#include "streamrl/sparse/key_blocks.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace streamrl::sparse {

namespace {

// Both selections take one sequence's [H, S, *] queries and keys and the same block budget.
void check_block_args(const char* name, const torch::Tensor& q, const torch::Tensor& k,
                      const KeyBlockConfig& config, int64_t stride = 1) {
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes(), name,
              ": queries and keys must both be [H, S, d], got ", q.sizes(), " and ", k.sizes());
  TORCH_CHECK(config.block > 0 && config.keep > 0 && config.recent >= 0, name,
              ": block and keep must be > 0 and recent >= 0");
  TORCH_CHECK(stride > 0, name, ": stride must be > 0");
}

// [H, nb, keep] from per-block scores [H, nb, nb]: the diagonal and the `recent` blocks before it,
// then the eligible (causal, not forced) blocks with the highest scores.
torch::Tensor pick_blocks(torch::Tensor block_scores, const KeyBlockConfig& config) {
  const int64_t H = block_scores.size(0), nb = block_scores.size(1);
  const int64_t keep = std::min(config.keep, nb);
  // Forced blocks (diagonal and recent) and non-causal ones leave the competition.
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(block_scores.device());
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

}  // namespace

torch::Tensor select_key_blocks(const torch::Tensor& q_lr, const torch::Tensor& k_lr,
                                const KeyBlockConfig& config) {
  check_block_args("select_key_blocks", q_lr, k_lr, config);
  torch::NoGradGuard no_grad;
  const int64_t H = q_lr.size(0), S = q_lr.size(1), r = q_lr.size(2), bs = config.block;
  const int64_t nb = (S + bs - 1) / bs, pad = nb * bs - S;
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
  return pick_blocks(std::get<0>(scores.view({H, nb, nb, bs}).max(3)), config);
}

torch::Tensor best_key_blocks(const torch::Tensor& q, const torch::Tensor& k,
                              const KeyBlockConfig& config, double scale, int64_t stride) {
  check_block_args("best_key_blocks", q, k, config, stride);
  torch::NoGradGuard no_grad;
  const int64_t H = q.size(0), S = q.size(1), bs = config.block;
  const int64_t nb = (S + bs - 1) / bs;
  const torch::Tensor qf = q.to(torch::kFloat32), kf = k.to(torch::kFloat32);
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(q.device());
  // [H, nb, nb]: the attention mass each query block's rows (every stride-th, as block_coverage
  // samples them) put on each key block. One query block at a time against its causal keys.
  torch::Tensor mass = torch::zeros({H, nb, nb}, qf.options());
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t lo = i * bs, hi = std::min(S, lo + bs),
                  first = (lo + stride) / stride * stride - 1;
    if (first >= hi) continue;  // no row of this block is sampled
    const torch::Tensor rows = torch::arange(first, hi, stride, opts);
    const torch::Tensor scores =
        torch::matmul(qf.index_select(1, rows), kf.narrow(1, 0, hi).transpose(1, 2)) * scale;
    const torch::Tensor after = torch::arange(hi, opts).view({1, hi}) > rows.view({-1, 1});
    const torch::Tensor p =
        torch::softmax(scores.masked_fill(after, -std::numeric_limits<float>::infinity()), -1)
            .sum(1);  // [H, hi]
    const int64_t pad = (i + 1) * bs - hi;
    mass.select(1, i)
        .narrow(1, 0, i + 1)
        .copy_((pad > 0 ? torch::cat({p, torch::zeros({H, pad}, p.options())}, 1) : p)
                   .view({H, i + 1, bs})
                   .sum(2));
  }
  return pick_blocks(mass, config);
}

}  // namespace streamrl::sparse
