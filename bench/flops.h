// FLOP counts of the transformer used to express throughput as a fraction of the GEMM roofline.
#pragma once

#include "streamrl/model/model_config.h"

namespace streamrl::bench {

// Matmul FLOPs per token of a forward pass (2 per multiply-add), excluding attention scores.
inline double forward_flops_per_token(const model::ModelConfig& c) {
  const double d = c.hidden_size, hd = c.head_dim;
  const double attn = d * hd * (c.num_attention_heads * 2 + c.num_key_value_heads * 2);
  const double mlp = 3 * d * c.intermediate_size;
  return 2 * (c.num_hidden_layers * (attn + mlp) + d * c.vocab_size);
}

// Attention score and weighted-sum FLOPs for one query over `context` keys, all layers.
inline double attention_flops(const model::ModelConfig& c, double context) {
  return 2 * 2 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * context;
}

}  // namespace streamrl::bench
