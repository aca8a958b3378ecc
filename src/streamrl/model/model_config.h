// The Hugging Face config.json of the Llama / Qwen2 / Qwen3 model family and its mixture-of-experts
// members Mixtral, Qwen2-MoE and Qwen3-MoE: parsing, validation and writing, so that
// a real HF checkpoint loads unchanged and ours load in transformers. Holds architecture only;
// nothing here knows about training.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace streamrl::model {

// config.json "rope_scaling". Only scalings that are a fixed rescaling of the inverse frequencies
// are supported; ones that depend on the sequence length (dynamic, yarn, longrope) are rejected.
struct RopeScaling {
  std::string rope_type = "default";  // "default" (none, config.json null) | "linear" | "llama3"
  double factor = 1.0;                // linear and llama3: how much longer the context becomes
  double low_freq_factor = 1.0;       // llama3 only
  double high_freq_factor = 4.0;      // llama3 only
  int64_t original_max_position_embeddings = 8192;  // llama3 only: the pre-scaling context

  bool operator==(const RopeScaling&) const = default;
};

// config.json fields. The defaults are those of transformers' LlamaConfig where parsing allows a
// field to be absent; a config built in code must set the sizes (they default to 0, which
// validate() rejects).
struct ModelConfig {
  // "llama" | "qwen2" | "qwen3" | "mixtral" | "qwen2_moe" | "qwen3_moe"
  std::string model_type = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // SwiGLU inner width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;         // config.json default: num_attention_heads (no GQA)
  int64_t head_dim = 0;                    // config.json default: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;  // qwen2's config.json default is 32768
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  double initializer_range = 0.02;   // std of the normal init of linear and embedding weights
  bool tie_word_embeddings = false;  // lm_head shares embed_tokens' weight
  // Bias terms. HF Qwen2 always biases q/k/v and nothing else; HF Llama's "attention_bias" biases
  // q/k/v and o_proj alike, its "mlp_bias" biases gate/up/down_proj.
  bool attention_bias = false;  // q_proj, k_proj, v_proj
  bool o_proj_bias = false;
  bool mlp_bias = false;                // gate_proj, up_proj, down_proj
  std::string hidden_act = "silu";      // the only activation supported
  int64_t bos_token_id = -1;            // -1: none
  std::vector<int64_t> eos_token_ids;   // config.json "eos_token_id": an id, a list, or null
  int64_t pad_token_id = -1;            // -1: none
  std::string torch_dtype = "float32";  // dtype of the stored weights; informational
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k before RoPE (q_norm, k_norm)

  // Mixture of experts (mixtral, qwen2_moe, qwen3_moe); num_experts 0 = every MLP dense.
  int64_t num_experts = 0;            // mixtral: num_local_experts
  int64_t num_experts_per_tok = 0;    // the checkpoint's k of top-k routing
  int64_t moe_intermediate_size = 0;  // each expert's SwiGLU width (mixtral: intermediate_size)
  bool norm_topk_prob = false;      // renormalise the chosen experts' probabilities (mixtral: yes)
  int64_t decoder_sparse_step = 1;  // layer i is MoE when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;         // ... and i is not listed here (those are dense)
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe: an always-on expert with a gate
  double router_aux_loss_coef = 0.001;          // the checkpoint's load-balancing coefficient

  bool is_moe() const { return num_experts > 0; }
  bool moe_layer(int64_t layer) const;             // whether decoder layer `layer` has experts
  int64_t moe_layers_before(int64_t layer) const;  // MoE layers among layers [0, layer)

  // Throws InputError on the first violated constraint, naming the field(s) and numbers: sizes
  // positive, heads divisible by KV heads, even head_dim (RoPE rotates pairs), silu activation,
  // a supported model_type with the bias flags that type can express, positive eps/theta, a
  // supported rope_scaling with sane parameters, token ids >= -1.
  void validate() const;

  // RoPE inverse frequencies [head_dim / 2], radians per position: theta^(-2i/head_dim) with
  // rope_scaling applied (exactly transformers' computation, in double precision).
  std::vector<double> rope_inv_freq() const;

  // The "architectures" entry transformers needs, e.g. "LlamaForCausalLM", "MixtralForCausalLM".
  std::string architecture() const;

  bool operator==(const ModelConfig&) const = default;
};

// Parses config.json content. Unknown fields are ignored (real configs carry many); a missing
// required size field, a field of the wrong JSON type, an unsupported model_type (e.g. "mistral"),
// rope_scaling or sliding window, and every
// validate() failure is an InputError starting with `source_name` and naming the field. A null
// field counts as absent.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source_name);

// Reads and parses a config.json file: InputError for a missing file or malformed JSON, naming the
// file, plus the errors of parse_model_config.
ModelConfig load_model_config(const std::filesystem::path& file);

// config.json content that transformers loads as the same model (AutoConfig +
// AutoModelForCausalLM) and that parse_model_config reads back to an equal ModelConfig.
nlohmann::json to_json(const ModelConfig& config);

}  // namespace streamrl::model
