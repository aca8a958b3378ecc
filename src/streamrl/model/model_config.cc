// config.json parsing follows transformers' LlamaConfig / Qwen2Config / Qwen3Config and their MoE
// siblings (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig): the same field names, defaults and bias
// semantics, so a config means the same model here and there.
#include "streamrl/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Typed access to one JSON object's fields; every error names the source and the full field name.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // The field, or nullptr when absent or null.
  const json* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw InputError(source_ + ": field '" + prefix_ + key + "' " + what);
  }

  [[noreturn]] void type_error(const char* key, const char* expected, const json& v) const {
    std::string shown = v.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    fail(key, "must be " + std::string(expected) + ", got " + shown);
  }

  int64_t as_int(const char* key, const json& v) const {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      type_error(key, "an integer", v);
    }
    return v.get<int64_t>();
  }

  int64_t require_int(const char* key) const {
    const json* v = find(key);
    if (!v) throw InputError(source_ + ": missing required field '" + prefix_ + key + "'");
    return as_int(key, *v);
  }

  double require_number(const char* key) const {
    const json* v = find(key);
    if (!v) throw InputError(source_ + ": missing required field '" + prefix_ + key + "'");
    if (!v->is_number()) type_error(key, "a number", *v);
    return v->get<double>();
  }

  // The read() overloads leave `out` unchanged when the field is absent.
  void read(const char* key, int64_t& out) const {
    if (const json* v = find(key)) out = as_int(key, *v);
  }
  void read(const char* key, double& out) const {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_number()) type_error(key, "a number", *v);
    out = v->get<double>();
  }
  void read(const char* key, bool& out) const {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_boolean()) type_error(key, "true or false", *v);
    out = v->get<bool>();
  }
  void read(const char* key, std::vector<int64_t>& out) const {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array()) type_error(key, "a list of integers", *v);
    out.clear();
    for (const auto& x : *v) out.push_back(as_int(key, x));
  }
  void read(const char* key, std::string& out) const {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_string()) type_error(key, "a string", *v);
    out = v->get<std::string>();
  }

  const std::string& source() const { return source_; }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;  // "rope_scaling." inside that sub-object
};

RopeScaling parse_rope_scaling(const json& v, const Fields& parent) {
  if (!v.is_object()) parent.type_error("rope_scaling", "an object or null", v);
  Fields f(v, parent.source(), "rope_scaling.");
  RopeScaling s;
  // transformers renamed "type" to "rope_type"; configs in the wild carry either.
  if (f.find("rope_type")) {
    f.read("rope_type", s.rope_type);
  } else if (f.find("type")) {
    f.read("type", s.rope_type);
  } else {
    throw InputError(parent.source() + ": field 'rope_scaling' has no 'rope_type'");
  }
  if (s.rope_type == "linear") {
    s.factor = f.require_number("factor");
  } else if (s.rope_type == "llama3") {
    s.factor = f.require_number("factor");
    s.low_freq_factor = f.require_number("low_freq_factor");
    s.high_freq_factor = f.require_number("high_freq_factor");
    s.original_max_position_embeddings = f.require_int("original_max_position_embeddings");
  } else if (s.rope_type != "default") {
    throw InputError(parent.source() + ": rope_scaling type '" + s.rope_type +
                     "' is not supported (supported: default, linear, llama3)");
  }
  return s;
}

std::vector<int64_t> parse_eos(const json& v, const Fields& f) {
  if (v.is_number_integer()) return {f.as_int("eos_token_id", v)};
  if (!v.is_array()) f.type_error("eos_token_id", "an integer or a list of integers", v);
  std::vector<int64_t> ids;
  for (const auto& id : v) ids.push_back(f.as_int("eos_token_id", id));
  return ids;
}

json token_id_json(int64_t id) { return id < 0 ? json(nullptr) : json(id); }

[[noreturn]] void invalid(const std::string& what) {
  throw InputError("invalid model config: " + what);
}

void require_positive(const char* name, int64_t value) {
  if (value <= 0) invalid(std::string(name) + " must be positive, got " + std::to_string(value));
}

void require_positive(const char* name, double value) {
  if (!(value > 0) || !std::isfinite(value)) {
    invalid(std::string(name) + " must be a positive number, got " + std::to_string(value));
  }
}

constexpr const char* kSupported = "llama, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe";

bool known_type(const std::string& t) {
  return t == "llama" || t == "qwen2" || t == "qwen3" || t == "mixtral" || t == "qwen2_moe" ||
         t == "qwen3_moe";
}
bool moe_type(const std::string& t) {
  return t == "mixtral" || t == "qwen2_moe" || t == "qwen3_moe";
}
// Qwen2 and Qwen2-MoE bias q/k/v and nothing else.
bool qkv_bias_type(const std::string& t) { return t == "qwen2" || t == "qwen2_moe"; }

}  // namespace

bool ModelConfig::moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::moe_layers_before(int64_t layer) const {
  int64_t n = 0;
  for (int64_t l = 0; l < layer; ++l) n += moe_layer(l) ? 1 : 0;
  return n;
}

void ModelConfig::validate() const {
  if (!known_type(model_type)) {
    invalid("model_type '" + model_type + "' is not supported (supported: " + kSupported + ")");
  }
  require_positive("vocab_size", vocab_size);
  require_positive("hidden_size", hidden_size);
  require_positive("intermediate_size", intermediate_size);
  require_positive("num_hidden_layers", num_hidden_layers);
  require_positive("num_attention_heads", num_attention_heads);
  require_positive("num_key_value_heads", num_key_value_heads);
  require_positive("head_dim", head_dim);
  require_positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0) {
    invalid("num_attention_heads (" + std::to_string(num_attention_heads) +
            ") must be divisible by num_key_value_heads (" + std::to_string(num_key_value_heads) +
            ")");
  }
  if (head_dim % 2 != 0) {
    invalid("head_dim (" + std::to_string(head_dim) + ") must be even: RoPE rotates pairs");
  }
  require_positive("rope_theta", rope_theta);
  require_positive("rms_norm_eps", rms_norm_eps);
  if (!(initializer_range >= 0) || !std::isfinite(initializer_range)) {
    invalid("initializer_range must be >= 0, got " + std::to_string(initializer_range));
  }
  if (hidden_act != "silu") {
    invalid("hidden_act '" + hidden_act + "' is not supported (only silu: the MLP is SwiGLU)");
  }
  if (qkv_bias_type(model_type) && !(attention_bias && !o_proj_bias && !mlp_bias)) {
    invalid(model_type +
            " biases q/k/v only: needs attention_bias=true, o_proj_bias=false, "
            "mlp_bias=false");
  }
  if (!qkv_bias_type(model_type) && model_type != "llama" && mlp_bias) {
    invalid(model_type + " has no MLP bias: needs mlp_bias=false");
  }
  if (!qkv_bias_type(model_type) && attention_bias != o_proj_bias) {
    invalid(model_type + "'s attention_bias covers q/k/v and o_proj together, so attention_bias (" +
            std::string(attention_bias ? "true" : "false") + ") and o_proj_bias (" +
            (o_proj_bias ? "true" : "false") + ") must agree");
  }

  const RopeScaling& s = rope_scaling;
  if (s.rope_type != "default" && s.rope_type != "linear" && s.rope_type != "llama3") {
    invalid("rope_scaling type '" + s.rope_type +
            "' is not supported (supported: default, linear, llama3)");
  }
  if (s.rope_type != "default") require_positive("rope_scaling.factor", s.factor);
  if (s.rope_type == "llama3") {
    require_positive("rope_scaling.low_freq_factor", s.low_freq_factor);
    require_positive("rope_scaling.original_max_position_embeddings",
                     s.original_max_position_embeddings);
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      invalid("rope_scaling.high_freq_factor (" + std::to_string(s.high_freq_factor) +
              ") must exceed low_freq_factor (" + std::to_string(s.low_freq_factor) + ")");
    }
  }

  if (moe_type(model_type) != is_moe()) {
    invalid(model_type + (is_moe() ? " is dense: needs num_experts=0"
                                   : " is a mixture of experts: needs num_experts > 0"));
  }
  if (is_moe()) {
    require_positive("moe_intermediate_size", moe_intermediate_size);
    require_positive("decoder_sparse_step", decoder_sparse_step);
    if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts) {
      invalid("num_experts_per_tok (" + std::to_string(num_experts_per_tok) +
              ") must be in 1..num_experts (" + std::to_string(num_experts) + ")");
    }
    if (shared_expert_intermediate_size < 0 ||
        (shared_expert_intermediate_size > 0 && model_type != "qwen2_moe")) {
      invalid("shared_expert_intermediate_size is for qwen2_moe only and must be >= 0");
    }
    for (int64_t l : mlp_only_layers) {
      if (l < 0 || l >= num_hidden_layers) {
        invalid("mlp_only_layers entry " + std::to_string(l) + " is not a layer (0.." +
                std::to_string(num_hidden_layers - 1) + ")");
      }
    }
  }
  if (qk_norm != (model_type == "qwen3" || model_type == "qwen3_moe")) {
    invalid("q/k RMSNorm (qk_norm) comes with qwen3 and qwen3_moe and with them only");
  }

  if (bos_token_id < -1)
    invalid("bos_token_id must be >= 0 or -1, got " + std::to_string(bos_token_id));
  if (pad_token_id < -1)
    invalid("pad_token_id must be >= 0 or -1, got " + std::to_string(pad_token_id));
  for (int64_t id : eos_token_ids) {
    if (id < 0) invalid("eos_token_id entries must be >= 0, got " + std::to_string(id));
  }
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  std::vector<double> inv_freq(static_cast<size_t>(head_dim / 2));  // radians per position
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = 1.0 / std::pow(rope_theta, 2.0 * static_cast<double>(i) / head_dim);
  }
  const RopeScaling& s = rope_scaling;
  if (s.rope_type == "linear") {
    for (double& f : inv_freq) f /= s.factor;
  } else if (s.rope_type == "llama3") {
    // transformers' _compute_llama3_parameters: wavelengths longer than the original context /
    // low_freq_factor are stretched by `factor`, shorter than context / high_freq_factor kept, and
    // the band between interpolated linearly in context / wavelength.
    const auto context = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = context / s.low_freq_factor;    // positions
    const double high_freq_wavelen = context / s.high_freq_factor;  // positions
    for (double& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

std::string ModelConfig::architecture() const {
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "mixtral") return "MixtralForCausalLM";
  if (model_type == "qwen2_moe") return "Qwen2MoeForCausalLM";
  if (model_type == "qwen3_moe") return "Qwen3MoeForCausalLM";
  return "LlamaForCausalLM";
}

ModelConfig parse_model_config(const json& j, const std::string& source_name) {
  if (!j.is_object()) throw InputError(source_name + ": a model config must be a JSON object");
  Fields f(j, source_name);
  ModelConfig c;
  f.read("model_type", c.model_type);
  if (!known_type(c.model_type)) {
    throw InputError(source_name + ": model_type '" + c.model_type +
                     "' is not supported (supported: " + kSupported + ")");
  }
  const std::string& type = c.model_type;
  const bool qwen = type.starts_with("qwen");

  c.vocab_size = f.require_int("vocab_size");
  c.hidden_size = f.require_int("hidden_size");
  c.intermediate_size = f.require_int("intermediate_size");
  c.num_hidden_layers = f.require_int("num_hidden_layers");
  c.num_attention_heads = f.require_int("num_attention_heads");
  c.num_key_value_heads = c.num_attention_heads;
  f.read("num_key_value_heads", c.num_key_value_heads);
  if (f.find("head_dim")) {
    f.read("head_dim", c.head_dim);
  } else if (c.num_attention_heads > 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw InputError(source_name + ": hidden_size (" + std::to_string(c.hidden_size) +
                       ") is not divisible by num_attention_heads (" +
                       std::to_string(c.num_attention_heads) + ") and no head_dim is given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (qwen) c.max_position_embeddings = 32768;
  if (type == "mixtral") c.max_position_embeddings = 4096 * 32;
  f.read("max_position_embeddings", c.max_position_embeddings);
  f.read("rope_theta", c.rope_theta);
  if (const json* rs = f.find("rope_scaling")) c.rope_scaling = parse_rope_scaling(*rs, f);
  f.read("rms_norm_eps", c.rms_norm_eps);
  f.read("initializer_range", c.initializer_range);
  f.read("tie_word_embeddings", c.tie_word_embeddings);
  f.read("hidden_act", c.hidden_act);
  // Newer transformers write "dtype" where older ones wrote "torch_dtype".
  f.read(f.find("torch_dtype") ? "torch_dtype" : "dtype", c.torch_dtype);

  if (qwen) {
    bool sliding = false;
    f.read("use_sliding_window", sliding);
    if (sliding) {
      throw InputError(source_name +
                       ": use_sliding_window=true is not supported (attention is always full)");
    }
  }
  if (type == "mixtral" && f.find("sliding_window")) {
    throw InputError(source_name +
                     ": sliding_window is not supported (attention is always full); set it null");
  }
  if (qkv_bias_type(type)) {
    c.attention_bias = true;
  } else {
    f.read("attention_bias", c.attention_bias);
    c.o_proj_bias = c.attention_bias;
    if (type == "llama") f.read("mlp_bias", c.mlp_bias);
  }
  c.qk_norm = type == "qwen3" || type == "qwen3_moe";

  if (type == "mixtral") {
    c.num_experts = 8, c.num_experts_per_tok = 2, c.norm_topk_prob = true;
    f.read("num_local_experts", c.num_experts);
    f.read("num_experts_per_tok", c.num_experts_per_tok);
    c.moe_intermediate_size = c.intermediate_size;  // Mixtral's experts are its MLPs
    f.read("router_aux_loss_coef", c.router_aux_loss_coef);
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    // Qwen2MoeConfig / Qwen3MoeConfig defaults.
    c.num_experts = type == "qwen2_moe" ? 60 : 128;
    c.num_experts_per_tok = type == "qwen2_moe" ? 4 : 8;
    c.moe_intermediate_size = type == "qwen2_moe" ? 1408 : 768;
    if (type == "qwen2_moe") c.shared_expert_intermediate_size = 5632;
    f.read("num_experts", c.num_experts);
    f.read("num_experts_per_tok", c.num_experts_per_tok);
    f.read("moe_intermediate_size", c.moe_intermediate_size);
    f.read("norm_topk_prob", c.norm_topk_prob);
    f.read("decoder_sparse_step", c.decoder_sparse_step);
    f.read("mlp_only_layers", c.mlp_only_layers);
    if (type == "qwen2_moe") {
      f.read("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    }
    f.read("router_aux_loss_coef", c.router_aux_loss_coef);
  }

  f.read("bos_token_id", c.bos_token_id);
  f.read("pad_token_id", c.pad_token_id);
  if (const json* eos = f.find("eos_token_id")) c.eos_token_ids = parse_eos(*eos, f);

  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(source_name + ": " + e.what());
  }
  return c;
}

ModelConfig load_model_config(const fs::path& file) {
  const std::string text = core::read_file(file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(file.string() + " is not valid JSON: " + e.what());
  }
  return parse_model_config(j, file.string());
}

json to_json(const ModelConfig& c) {
  json j = {
      {"architectures", json::array({c.architecture()})},
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rope_theta", c.rope_theta},
      {"rms_norm_eps", c.rms_norm_eps},
      {"initializer_range", c.initializer_range},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"hidden_act", c.hidden_act},
      {"bos_token_id", token_id_json(c.bos_token_id)},
      {"pad_token_id", token_id_json(c.pad_token_id)},
      {"torch_dtype", c.torch_dtype},
  };
  if (c.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }

  const RopeScaling& s = c.rope_scaling;
  if (s.rope_type == "default") {
    j["rope_scaling"] = nullptr;
  } else if (s.rope_type == "linear") {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", s.rope_type},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }

  const std::string& type = c.model_type;
  if (type.starts_with("qwen")) j["use_sliding_window"] = false;
  if (type == "mixtral") j["sliding_window"] = nullptr;
  // Qwen2's q/k/v bias is implied by the model type.
  if (!qkv_bias_type(type)) j["attention_bias"] = c.attention_bias;
  if (type == "llama") j["mlp_bias"] = c.mlp_bias;
  if (type == "mixtral") {
    j["num_local_experts"] = c.num_experts;
  } else if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    if (type == "qwen2_moe") {
      j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    }
  }
  if (c.is_moe()) {
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    j["output_router_logits"] = false;
  }
  return j;
}

}  // namespace streamrl::model
