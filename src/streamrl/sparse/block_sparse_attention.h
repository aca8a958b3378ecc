// Causal attention where each block of queries attends only to its selected key blocks
// (select_key_blocks): the blocks' keys and values are gathered and the work stays two batched
// GEMMs, so the CPU runs it at GEMM speed; forward and backward (autograd through the gather).
#pragma once

#include <torch/torch.h>

namespace streamrl::sparse {

// q [H, S, hd]; k, v [Hkv, S, hd] (query head h uses kv head h / (H / Hkv)); blocks [H, nb, keep]
// int64 key-block indices (nb = ceil(S / block)), each row holding its diagonal block (as
// select_key_blocks gives); a block listed twice in a row counts once.
// Keys after a query are masked. Returns [H, S, hd]. With every causal block kept it equals dense
// causal attention.
torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& blocks,
                                     int64_t block, double scale);

// Dense causal attention of the same shapes (the matmul form of the training path), the reference
// and the baseline the sparse kernel is measured against.
torch::Tensor dense_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, double scale);

}  // namespace streamrl::sparse
