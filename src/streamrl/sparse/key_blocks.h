// Which key blocks each query block attends to, chosen from low-rank scores: queries are grouped
// in blocks that share one key set (so the sparse kernel stays GEMM-shaped), and the [S, S] score
// matrix is never formed: one proxy query per block is scored against every key.
#pragma once

#include <torch/torch.h>

namespace streamrl::sparse {

struct KeyBlockConfig {
  int64_t block = 64;  // tokens per query block and per key block
  int64_t keep = 8;    // key blocks per query block (the diagonal and `recent` included)
  int64_t recent = 1;  // the blocks just before the diagonal, always kept (a local window)
};

// q_lr [H, S, r], k_lr [H, S, r] (low-rank queries and keys of one sequence). Returns [H, nb, keep]
// int64 key-block indices per query block (nb = ceil(S / block)), causal: block j < i's own
// block or the diagonal. The diagonal and the `recent` blocks before it come first; the others are
// the blocks with the highest max score of the block's proxy query (its mean low-rank query) over
// their keys. Rows with fewer causal blocks than `keep` repeat the diagonal (a no-op duplicate the
// attention masks out).
torch::Tensor select_key_blocks(const torch::Tensor& q_lr, const torch::Tensor& k_lr,
                                const KeyBlockConfig& config);

// The same [H, nb, keep] layout chosen from the real attention: each query block keeps the blocks
// that hold the most softmax mass of its rows (q, k [H, S, d] per query head; every `stride`-th
// row, those block_coverage samples). No block choice at this budget covers more of those rows, so
// a predictor is measured against it. O(S^2 / stride) work, O(block * S) memory.
torch::Tensor best_key_blocks(const torch::Tensor& q, const torch::Tensor& k,
                              const KeyBlockConfig& config, double scale, int64_t stride = 1);

}  // namespace streamrl::sparse
