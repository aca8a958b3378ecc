#include "streamrl/model/checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/model/sparse_training.h"

namespace streamrl::model {
namespace fs = std::filesystem;

namespace {

std::string shape_str(c10::IntArrayRef shape) {
  std::ostringstream ss;
  ss << shape;
  return ss.str();
}

constexpr const char* kSparseConfigFile = "sparse_attention.json";
constexpr const char* kSparseWeightsFile = "sparse_attention.safetensors";

nlohmann::json to_json(const SparseAttentionConfig& c) {
  return {{"rank", c.rank},
          {"block", c.train.block},
          {"keep", c.train.keep},
          {"recent", c.train.recent},
          {"min_tokens", c.min_tokens},
          {"decode",
           {{"block", c.decode.block}, {"keep", c.decode.keep}, {"recent", c.decode.recent}}}};
}

constexpr const char* kSparsePrefix = "sparse_attention.";  // in a weight map (sync)
constexpr const char* kSparseConfigTensor = "sparse_attention.config";

// The predictors and sparse-head flags, named "layers.{l}.{param}" / "layers.{l}.sparse_heads".
TensorMap sparse_tensors(CausalLM& model) {
  TensorMap tensors;
  auto& predictors = model->sparse_predictors();
  for (size_t l = 0; l < predictors.size(); ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (const auto& p : predictors[l]->named_parameters()) {
      tensors[layer + p.key()] = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    }
    tensors[layer + "sparse_heads"] = model->sparse_heads(l).contiguous();
  }
  return tensors;
}

// The config checked as model.sparse_attention is (InputError naming `source`).
SparseAttentionConfig checked_sparse_config(const std::string& json, const std::string& source) {
  try {  // JSON is YAML
    return read_sparse_attention_config(core::Config::from_string(json), /*required=*/true);
  } catch (const InputError& e) {
    throw InputError(source + ": not a sparse-attention config (" + e.what() + ")");
  }
}

// Checks sparse_tensors-named `tensors` whole against predictors of `config`'s rank for `model`;
// returns the per-layer head flags. Nothing changes, so a bad set leaves the model as it was.
std::vector<torch::Tensor> check_sparse_tensors(CausalLM& model,
                                                const SparseAttentionConfig& config,
                                                const TensorMap& tensors,
                                                const std::string& source) {
  const ModelConfig& mc = model->config();
  sparse::LowRankPredictor shape(mc.hidden_size, mc.num_attention_heads, config.rank);
  std::vector<torch::Tensor> heads;
  for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (const auto& p : shape->named_parameters()) {
      auto it = tensors.find(layer + p.key());
      if (it == tensors.end() || it->second.sizes() != p.value().sizes() ||
          !it->second.is_floating_point()) {
        throw InputError(source + ": tensor '" + layer + p.key() +
                         "' is missing or not a float tensor of shape " +
                         shape_str(p.value().sizes()));
      }
    }
    auto it = tensors.find(layer + "sparse_heads");
    if (it == tensors.end() || it->second.dim() != 1 ||
        it->second.size(0) != mc.num_attention_heads) {
      throw InputError(source + ": tensor '" + layer +
                       "sparse_heads' is missing or not one flag per attention head");
    }
    heads.push_back(it->second);
  }
  const size_t expected =
      static_cast<size_t>(mc.num_hidden_layers) * (shape->named_parameters().size() + 1);
  if (tensors.size() != expected) {
    throw InputError(source + ": holds sparse-attention tensors of another model (" +
                     std::to_string(tensors.size()) + ", expected " + std::to_string(expected) +
                     ")");
  }
  return heads;
}

// Installs checked tensors: enables `config` (unless the model has it already) and copies them.
void apply_sparse_tensors(CausalLM& model, const SparseAttentionConfig& config,
                          const TensorMap& tensors, const std::vector<torch::Tensor>& heads) {
  if (!model->sparse_attention() || to_json(*model->sparse_attention()) != to_json(config)) {
    model->enable_sparse_attention(config, 0, false);
  }
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < heads.size(); ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (auto& p : model->sparse_predictors()[l]->named_parameters()) {
      p.value().copy_(tensors.at(layer + p.key()).to(torch::kFloat32));
    }
    model->set_sparse_heads(l, heads[l]);
  }
}

// The config travels in a weight map as float32 values (exact for these integers; the weight
// wire carries float tensors only), in to_json's order.
torch::Tensor sparse_config_tensor(const SparseAttentionConfig& c) {
  return torch::tensor(
             std::vector<int64_t>{c.rank, c.train.block, c.train.keep, c.train.recent, c.min_tokens,
                                  c.decode.block, c.decode.keep, c.decode.recent},
             torch::kLong)
      .to(torch::kFloat32);
}

std::string sparse_config_json(const torch::Tensor& t, const std::string& source) {
  const torch::Tensor v = t.detach().to(torch::kCPU, torch::kDouble).contiguous();
  if (v.dim() != 1 || v.size(0) != 8 || !v.equal(v.round()) || v.abs().max().item<double>() > 1e9) {
    throw InputError(source + ": tensor '" + kSparseConfigTensor + "' must be 8 integer values");
  }
  const double* x = v.data_ptr<double>();
  auto i = [&](int k) { return static_cast<int64_t>(x[k]); };
  return nlohmann::json({{"rank", i(0)},
                         {"block", i(1)},
                         {"keep", i(2)},
                         {"recent", i(3)},
                         {"min_tokens", i(4)},
                         {"decode", {{"block", i(5)}, {"keep", i(6)}, {"recent", i(7)}}}})
      .dump();
}

// A weight map's sparse-attention part ("sparse_attention." names), checked against `model`:
// nullopt when the map has none.
struct SparsePart {
  SparseAttentionConfig config;
  TensorMap tensors;  // layer-named
  std::vector<torch::Tensor> heads;
};
std::optional<SparsePart> checked_sparse_part(CausalLM& model,
                                              const std::map<std::string, torch::Tensor>& weights,
                                              const std::string& source) {
  SparsePart part;
  bool any = false;
  for (const auto& [name, t] : weights) {
    if (!name.starts_with(kSparsePrefix)) continue;
    any = true;
    if (name != kSparseConfigTensor) part.tensors[name.substr(std::strlen(kSparsePrefix))] = t;
  }
  if (!any) return std::nullopt;
  auto it = weights.find(kSparseConfigTensor);
  if (it == weights.end()) {
    throw InputError(source + ": sparse-attention tensors without '" + kSparseConfigTensor + "'");
  }
  part.config = checked_sparse_config(sparse_config_json(it->second, source), source);
  part.heads = check_sparse_tensors(model, part.config, part.tensors, source);
  return part;
}

void write_sparse_attention(const fs::path& dir, CausalLM& model) {
  write_safetensors(dir / kSparseWeightsFile, sparse_tensors(model), {{"format", "pt"}});
  core::write_file_atomic(dir / kSparseConfigFile,
                          to_json(*model->sparse_attention()).dump(2) + "\n");
}

}  // namespace

void save_checkpoint(const fs::path& dir, CausalLM& model, const std::string& tokenizer_json,
                     const std::map<std::string, std::string>& extra_files) {
  fs::path tmp = dir;
  tmp += ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  TensorMap tensors;
  for (auto& [name, t] : model->named_weights()) {
    tensors[name] = t.detach().to(torch::kFloat32).contiguous();
  }
  write_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
  core::write_file_atomic(tmp / "config.json", to_json(model->config()).dump(2) + "\n");
  core::write_file_atomic(tmp / "tokenizer.json", tokenizer_json);
  if (model->sparse_attention()) write_sparse_attention(tmp, model);
  for (const auto& [name, bytes] : extra_files) core::write_file_atomic(tmp / name, bytes);
  core::replace_directory(tmp, dir);
}

std::map<std::string, std::string> checkpoint_side_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (dir.empty()) return out;
  for (const char* name : {"tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                           "special_tokens_map.json"}) {
    std::ifstream in(dir / name, std::ios::binary);
    if (!in) continue;
    out[name] = std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

namespace {

// check_weights, returning the checked sparse-attention part for load_weights to install.
std::optional<SparsePart> check_all(CausalLM& model,
                                    const std::map<std::string, torch::Tensor>& weights,
                                    const std::string& source) {
  std::optional<SparsePart> sparse = checked_sparse_part(model, weights, source);
  std::map<std::string, torch::Tensor> expected;
  for (auto& [name, t] : model->named_weights()) expected[name] = t;
  for (const auto& [name, param] : expected) {
    auto it = weights.find(name);
    if (it == weights.end()) {
      throw InputError(source + ": tensor '" + name + "' is missing (expected shape " +
                       shape_str(param.sizes()) + ")");
    }
    if (it->second.sizes() != param.sizes()) {
      throw InputError(source + ": tensor '" + name + "' has shape " +
                       shape_str(it->second.sizes()) + ", expected " + shape_str(param.sizes()));
    }
    if (!it->second.is_floating_point()) {
      throw InputError(source + ": tensor '" + name + "' has non-float dtype " +
                       std::string(c10::toString(it->second.scalar_type())));
    }
  }
  for (const auto& [name, t] : weights) {
    if (expected.count(name) || name.starts_with(kSparsePrefix)) continue;
    // Tied checkpoints sometimes still carry lm_head.weight; it must then equal the embedding,
    // which is what the model will use.
    if (name == "lm_head.weight" && model->config().tie_word_embeddings) {
      const torch::Tensor& emb = weights.at("model.embed_tokens.weight");
      if (t.sizes() != emb.sizes() || !t.is_floating_point() ||
          !torch::allclose(t.to(torch::kFloat32), emb.to(torch::kFloat32), 1e-3, 1e-3)) {
        throw InputError(source + ": tensor 'lm_head.weight' differs from the tied " +
                         "'model.embed_tokens.weight' (config says tie_word_embeddings; send the " +
                         "embedding only)");
      }
      continue;
    }
    throw InputError(source + ": unexpected tensor '" + name + "' (shape " + shape_str(t.sizes()) +
                     ") does not belong to this model config");
  }
  return sparse;
}

}  // namespace

void check_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                   const std::string& source) {
  check_all(model, weights, source);
}

void load_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                  const std::string& source) {
  torch::NoGradGuard no_grad;
  const std::optional<SparsePart> sparse = check_all(model, weights, source);
  for (auto& [name, param] : model->named_weights()) {
    param.copy_(weights.at(name).to(torch::kFloat32));
  }
  if (sparse) apply_sparse_tensors(model, sparse->config, sparse->tensors, sparse->heads);
}

std::map<std::string, torch::Tensor> sparse_attention_weights(CausalLM& model) {
  std::map<std::string, torch::Tensor> out;
  if (!model->sparse_attention()) return out;
  for (auto& [name, t] : sparse_tensors(model)) out[kSparsePrefix + name] = t.to(torch::kFloat32);
  out[kSparseConfigTensor] = sparse_config_tensor(*model->sparse_attention());
  return out;
}

CausalLM copy_model(CausalLM& model, const std::string& source) {
  CausalLM copy(model->config());
  copy->set_gating(model->gating());
  std::map<std::string, torch::Tensor> weights;
  for (auto& [name, t] : model->named_weights()) weights[name] = t;
  load_weights(copy, weights, source);
  return copy;
}

bool load_sparse_attention(CausalLM& model, const fs::path& dir) {
  const fs::path config_file = dir / kSparseConfigFile, weights_file = dir / kSparseWeightsFile;
  if (!fs::exists(config_file)) return false;
  const SparseAttentionConfig config =
      checked_sparse_config(core::read_file(config_file), config_file.string());
  const TensorMap tensors = read_safetensors(weights_file);
  const std::vector<torch::Tensor> heads =
      check_sparse_tensors(model, config, tensors, weights_file.string());
  apply_sparse_tensors(model, config, tensors, heads);
  return true;
}

CausalLM load_model(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw InputError("checkpoint directory not found: " + dir.string());
  ModelConfig config = load_model_config(dir / "config.json");
  CausalLM model(config);
  load_weights(model, read_safetensors_dir(dir), dir.string());
  load_sparse_attention(model, dir);
  return model;
}

}  // namespace streamrl::model
