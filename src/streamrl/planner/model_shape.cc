#include "streamrl/planner/model_shape.h"

#include "streamrl/core/errors.h"

namespace streamrl::planner {

double ModelShape::layer_params() const {
  const double h = hidden, q = heads * head_size(), kv = kv_heads * head_size();
  return 2 * h * q + 2 * h * kv + 3 * h * intermediate;
}

double ModelShape::params() const {
  const double embed = static_cast<double>(vocab) * hidden * (tied_embeddings ? 1 : 2);
  return layers * layer_params() + embed;
}

double ModelShape::kv_bytes_per_token() const {
  return 2.0 * layers * kv_heads * head_size() * bytes_per_param;
}

double ModelShape::forward_flops_per_token(double context) const {
  const double matmul = 2 * (params() - static_cast<double>(vocab) * hidden *
                                            (tied_embeddings ? 0 : 1));   // lm_head counted once
  const double attention = 4.0 * layers * heads * head_size() * context;  // QK^T and AV
  return matmul + attention;
}

ModelShape model_preset(const std::string& name) {
  // Intermediate sizes, vocabulary and the 7B's 4 KV heads from the released Qwen2.5 configs (the
  // paper's Table 2 prints 8; with 4 the KV term matches its measured PTL slope, Fig. 6).
  if (name == "qwen2.5-7b") return {name, 28, 3584, 28, 4, 18944, 152064, false};
  if (name == "qwen2.5-32b") return {name, 64, 5120, 40, 8, 27648, 152064, false};
  if (name == "qwen2.5-72b") return {name, 80, 8192, 64, 8, 29568, 152064, false};
  throw InputError("unknown model preset '" + name +
                   "' (known: qwen2.5-7b, qwen2.5-32b, qwen2.5-72b)");
}

ModelShape model_shape_from_hf(const nlohmann::json& c, const std::string& name) {
  try {
    ModelShape s;
    s.name = name;
    s.layers = c.at("num_hidden_layers").get<int>();
    s.hidden = c.at("hidden_size").get<int>();
    s.heads = c.at("num_attention_heads").get<int>();
    s.kv_heads = c.value("num_key_value_heads", s.heads);
    s.intermediate = c.at("intermediate_size").get<int>();
    s.vocab = c.at("vocab_size").get<int>();
    s.tied_embeddings = c.value("tie_word_embeddings", false);
    s.bytes_per_param = c.value("torch_dtype", std::string("bfloat16")) == "float32" ? 4 : 2;
    if (c.contains("head_dim") && !c["head_dim"].is_null()) s.head_dim = c["head_dim"].get<int>();
    if (s.layers <= 0 || s.hidden <= 0 || s.heads <= 0) throw InputError("non-positive sizes");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw InputError("malformed model config '" + name + "': " + e.what());
  }
}

}  // namespace streamrl::planner
