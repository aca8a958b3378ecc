#include "streamrl/model/kv_cache.h"

namespace streamrl::model {

KVCache::KVCache(const ModelConfig& config, int64_t num_slots, int64_t max_tokens,
                 torch::TensorOptions options)
    : num_slots_(num_slots), max_tokens_(max_tokens), options_(options) {
  TORCH_CHECK(num_slots > 0 && max_tokens > 0, "KVCache needs slots and tokens, got ", num_slots,
              " x ", max_tokens);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    k_.push_back(torch::zeros({num_slots, config.num_key_value_heads, max_tokens, config.head_dim},
                              options));
    v_.push_back(torch::zeros_like(k_.back()));
  }
  k_lr_.resize(k_.size());
}

torch::Tensor& KVCache::lowrank_keys(int64_t layer, int64_t heads, int64_t rank) {
  torch::Tensor& t = k_lr_.at(layer);
  if (!t.defined()) t = torch::zeros({num_slots_, heads, max_tokens_, rank}, options_);
  TORCH_CHECK(t.size(1) == heads && t.size(3) == rank, "KVCache: low-rank keys of layer ", layer,
              " are ", t.sizes(), ", asked for ", heads, " heads of rank ", rank);
  return t;
}

int64_t KVCache::bytes() const {
  int64_t total = 0;
  for (const auto& t : k_) total += 2 * t.numel() * t.element_size();
  for (const auto& t : k_lr_) total += t.defined() ? t.numel() * t.element_size() : 0;
  return total;
}

void KVCache::copy_prefix(int64_t src, int64_t dst, int64_t num_tokens) {
  if (src == dst || num_tokens == 0) return;
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l][dst].narrow(1, 0, num_tokens).copy_(k_[l][src].narrow(1, 0, num_tokens));
    v_[l][dst].narrow(1, 0, num_tokens).copy_(v_[l][src].narrow(1, 0, num_tokens));
    if (k_lr_[l].defined()) {
      k_lr_[l][dst].narrow(1, 0, num_tokens).copy_(k_lr_[l][src].narrow(1, 0, num_tokens));
    }
  }
}

}  // namespace streamrl::model
