// Attention of single query tokens against the slot KV cache, as a plain CPU kernel (other
// devices and dtypes: libtorch's fused attention over the gathered slots). Each row
// reads only its own slot's first `len` positions: no gather copies, no padding to the longest
// row, no mask. Used by the inference path, where every row is one token (decode tokens and
// packed prefill tokens alike); the training path keeps batched matmul attention.
#pragma once

#include <torch/torch.h>

namespace streamrl::model {

// q [N, H, hd] float (RoPE applied); k_cache, v_cache [S, Hkv, max_tokens, hd] float contiguous;
// slots [N] int64; lens [N] int64 (row n attends to positions [0, lens[n]) of slots[n]).
// Query head h uses kv head h / (H / Hkv). `max_len`: lens.max() when the caller knows it (0: read
// it, a device sync off the CPU). Returns [N, H, hd]. Not differentiable.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                               const torch::Tensor& v_cache, const torch::Tensor& slots,
                               const torch::Tensor& lens, double scale, int64_t max_len = 0);

}  // namespace streamrl::model
