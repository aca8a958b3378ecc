// DSV's low-rank predictor of attention scores for one layer: q_lr k_lrᵀ ≈ q kᵀ (pre-softmax;
// softmax keeps the order, so the predicted top keys are the real ones). It learns beside the
// model from the layer's input, on sampled queries, with no gradient into the model; its scores
// pick the key blocks of sparse attention. Also the profile that decides when a head goes sparse.
#pragma once

#include <torch/torch.h>

#include <utility>

namespace streamrl::sparse {

class LowRankPredictorImpl : public torch::nn::Module {
 public:
  // `rank` dimensions per head (DSV: 16).
  LowRankPredictorImpl(int64_t hidden, int64_t heads, int64_t rank = 16, uint64_t seed = 0);
  // x [S, hidden] (detached by the caller or not: gradients stop here) -> q_lr, k_lr [H, S, rank].
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x);
  int64_t heads() const { return heads_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t heads_, rank_;
  torch::nn::Linear proj_{nullptr};  // hidden -> 2 * heads * rank
};
TORCH_MODULE(LowRankPredictor);

// The predictor's loss against the real scores on every `stride`-th query (DSV's code: 0.9 cosine
// embedding loss + 0.1 MSE of L2-normalised score rows), over each query's causal keys only.
// q_lr, k_lr [H, S, r]; q, k [H, S, hd] real queries and keys per query head (detached here).
torch::Tensor predictor_loss(const torch::Tensor& q_lr, const torch::Tensor& k_lr,
                             const torch::Tensor& q, const torch::Tensor& k, int64_t stride = 16);

// Per head, the mean over sampled queries of the fraction of causal keys outside the critical set
// (the fewest keys holding `theta` of the attention mass). [H] float.
torch::Tensor head_sparsity(const torch::Tensor& q, const torch::Tensor& k, double scale,
                            double theta = 0.9, int64_t stride = 16);

// Per head, the mean over sampled queries of the real attention mass on the keys of the blocks
// their query block attends to. blocks [H, nb, keep] as block_sparse_attention takes. [H] float.
torch::Tensor block_coverage(const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& blocks, int64_t block, double scale,
                             int64_t stride = 16);

}  // namespace streamrl::sparse
