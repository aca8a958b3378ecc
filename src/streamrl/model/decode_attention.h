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

// DSV's sparse decoding: each row attends only to the key blocks its low-rank scores rank highest
// plus its most recent keys, so a step over a long context reads a fraction of the cache.
struct SparseDecodeOptions {
  int64_t block = 64;   // keys per block
  int64_t keep = 8;     // blocks chosen by score per row and kv head (besides the recent window)
  int64_t recent = 64;  // the last keys, always attended (the local window)
};

// As decode_attention, plus q_lr [N, H, r] (the rows' low-rank queries) and k_lr_cache
// [S, H, max_tokens, r] (low-rank keys, per query head, cached like the keys). A block's score is
// the highest q_lr . k_lr over its keys and the G query heads sharing the kv head (they share one
// key set, so each key is read once for all of them). Rows with fewer candidate blocks (those
// before the window) than `keep` attend to every key, exactly as decode_attention. `attended`
// (optional): the keys attended summed over rows and kv heads. CPU float only.
torch::Tensor sparse_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                      const torch::Tensor& v_cache, const torch::Tensor& q_lr,
                                      const torch::Tensor& k_lr_cache, const torch::Tensor& slots,
                                      const torch::Tensor& lens, double scale,
                                      const SparseDecodeOptions& options,
                                      int64_t* attended = nullptr);

// The keys sparse_decode_attention attends to, by the same rule: [N, kv_heads, lens.max()] bool.
// For measuring how much of the real attention mass the selection holds.
torch::Tensor sparse_decode_key_mask(const torch::Tensor& q_lr, const torch::Tensor& k_lr_cache,
                                     int64_t kv_heads, const torch::Tensor& slots,
                                     const torch::Tensor& lens, const SparseDecodeOptions& options);

}  // namespace streamrl::model
