// The shape of a decoder-only model as far as the planner's cost models care: parameter count,
// bytes of weights and of KV cache per token, FLOPs per token.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace streamrl::planner {

struct ModelShape {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int intermediate = 0;
  int vocab = 0;
  bool tied_embeddings = false;
  double bytes_per_param = 2;  // BF16 weights and KV cache
  int head_dim = 0;            // 0: hidden / heads (Qwen3 and Gemma set their own)

  double head_size() const { return head_dim > 0 ? head_dim : static_cast<double>(hidden) / heads; }
  // One decoder layer's weights: Q, K, V, O projections and the gated MLP.
  double layer_params() const;
  double params() const;
  double weight_bytes() const { return params() * bytes_per_param; }
  double kv_bytes_per_token() const;
  // Matmul FLOPs of one token's forward pass (2 per weight, embeddings excluded) plus attention
  // over `context` cached tokens.
  double forward_flops_per_token(double context) const;
};

// Qwen2.5-7B/32B/72B: layers, heads and hidden size of the paper's Table 2.
ModelShape model_preset(const std::string& name);  // InputError for an unknown name

// From a Hugging Face config.json object (hidden_size, num_hidden_layers, ...); `bytes_per_param`
// follows torch_dtype (float32 -> 4, else 2).
ModelShape model_shape_from_hf(const nlohmann::json& config, const std::string& name);

}  // namespace streamrl::planner
