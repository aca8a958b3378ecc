// Key/value cache for the inference path, organised in fixed slots: each slot holds one sequence's
// keys and values for every layer, up to `max_tokens` positions. Allocated once; slots are reused
// without reallocation. Which slot belongs to which request is the engine's business.
#pragma once

#include <torch/torch.h>

#include "streamrl/model/model_config.h"

namespace streamrl::model {

class KVCache {
 public:
  // `options`: the device and dtype of the model that fills it (default: CPU fp32).
  KVCache(const ModelConfig& config, int64_t num_slots, int64_t max_tokens,
          torch::TensorOptions options = {});
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  int64_t num_slots() const { return num_slots_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t bytes() const;

  // Per layer: [num_slots, num_kv_heads, max_tokens, head_dim] (a slot's positions of one
  // head are contiguous, so attention reads them without a copy).
  torch::Tensor& keys(int64_t layer) { return k_[layer]; }
  torch::Tensor& values(int64_t layer) { return v_[layer]; }
  // DSV sparse decoding's low-rank keys of `layer`: [num_slots, heads, max_tokens, rank],
  // allocated (zeros) on first use, so the caches of dense models hold none.
  torch::Tensor& lowrank_keys(int64_t layer, int64_t heads, int64_t rank);

  // Copies the first `num_tokens` cached positions of slot `src` to slot `dst` in every layer
  // (prefix sharing: the n samples of one prompt prefill once).
  void copy_prefix(int64_t src, int64_t dst, int64_t num_tokens);

 private:
  int64_t num_slots_;
  int64_t max_tokens_;
  torch::TensorOptions options_;
  std::vector<torch::Tensor> k_, v_, k_lr_;
};

}  // namespace streamrl::model
