// Global-denominator loss aggregation (loss_aggregation.h, spec §4).
#include "streamrl/rl/loss_aggregation.h"

namespace streamrl::rl {

LossDenominator global_denominator(const std::vector<torch::Tensor>& masks, double t_const) {
  LossDenominator d;
  d.t_const = t_const;
  for (const torch::Tensor& mask : masks) {
    TORCH_CHECK(mask.dim() == 2, "global_denominator: masks must be [b, T], got ", mask.sizes());
    const torch::Tensor per_row = mask.to(torch::kBool).sum(1);  // [b] masked tokens per row
    d.tokens += per_row.sum().item<double>();
    d.sequences += per_row.gt(0).sum().item<double>();
  }
  return d;
}

torch::Tensor aggregate(const torch::Tensor& per_token, const torch::Tensor& mask, LossAggMode mode,
                        const LossDenominator& denominator) {
  TORCH_CHECK(per_token.dim() == 2 && mask.sizes() == per_token.sizes(), "aggregate: per_token ",
              per_token.sizes(), " and mask ", mask.sizes(), " must both be [b, T]");
  const torch::Tensor m = mask.to(torch::kBool);
  const torch::Tensor masked = per_token.masked_fill(~m, 0);  // [b, T]
  torch::Tensor numerator;
  double count = 0;
  switch (mode) {
    case LossAggMode::kTokenMean:
      numerator = masked.sum();
      count = denominator.tokens;
      break;
    case LossAggMode::kSeqMeanTokenMean: {
      // Each row is averaged over its own tokens; clamp_min(1) only guards empty rows, whose
      // numerator is 0 and which the global sequence count leaves out.
      const torch::Tensor row_tokens = m.sum(1).clamp_min(1).to(per_token.scalar_type());  // [b]
      numerator = (masked.sum(1) / row_tokens).sum();
      count = denominator.sequences;
      break;
    }
    case LossAggMode::kSeqMeanTokenSumNorm:
      TORCH_CHECK(denominator.t_const > 0,
                  "aggregate: seq-mean-token-sum-norm needs t_const > 0, got ",
                  denominator.t_const);
      numerator = masked.sum();
      count = denominator.sequences * denominator.t_const;
      break;
  }
  if (count <= 0) {
    TORCH_CHECK(!m.any().item<bool>(),
                "aggregate: the global denominator is 0 but this micro-batch has masked tokens; "
                "build it from every micro-batch's mask first");
    return numerator;  // 0, still attached to the graph
  }
  return numerator / count;
}

}  // namespace streamrl::rl
