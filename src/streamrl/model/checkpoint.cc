#include "streamrl/model/checkpoint.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
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

void write_sparse_attention(const fs::path& dir, CausalLM& model) {
  TensorMap tensors;
  auto& predictors = model->sparse_predictors();
  for (size_t l = 0; l < predictors.size(); ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (const auto& p : predictors[l]->named_parameters()) {
      tensors[layer + p.key()] = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    }
    tensors[layer + "sparse_heads"] = model->sparse_heads(l).contiguous();
  }
  write_safetensors(dir / kSparseWeightsFile, tensors, {{"format", "pt"}});
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

void check_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                   const std::string& source) {
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
    if (expected.count(name)) continue;
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
}

void load_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                  const std::string& source) {
  torch::NoGradGuard no_grad;
  check_weights(model, weights, source);
  for (auto& [name, param] : model->named_weights()) {
    param.copy_(weights.at(name).to(torch::kFloat32));
  }
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
  SparseAttentionConfig config;
  try {  // JSON is YAML: the config reader checks it as it checks model.sparse_attention
    config = read_sparse_attention_config(core::Config::from_string(core::read_file(config_file)),
                                          /*required=*/true);
  } catch (const InputError& e) {
    throw InputError(config_file.string() + ": not a sparse-attention config (" + e.what() + ")");
  }
  const TensorMap tensors = read_safetensors(weights_file);
  // Checked whole against one predictor of the expected shape, so a bad file leaves `model` as it
  // was.
  const ModelConfig& mc = model->config();
  sparse::LowRankPredictor shape(mc.hidden_size, mc.num_attention_heads, config.rank);
  std::vector<torch::Tensor> heads;
  for (int64_t l = 0; l < mc.num_hidden_layers; ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (const auto& p : shape->named_parameters()) {
      auto it = tensors.find(layer + p.key());
      if (it == tensors.end() || it->second.sizes() != p.value().sizes()) {
        throw InputError(weights_file.string() + ": tensor '" + layer + p.key() +
                         "' is missing or not of shape " + shape_str(p.value().sizes()));
      }
    }
    auto it = tensors.find(layer + "sparse_heads");
    if (it == tensors.end() || it->second.dim() != 1 ||
        it->second.size(0) != mc.num_attention_heads) {
      throw InputError(weights_file.string() + ": tensor '" + layer +
                       "sparse_heads' is missing or not one flag per attention head");
    }
    heads.push_back(it->second);
  }
  const size_t expected =
      static_cast<size_t>(mc.num_hidden_layers) * (shape->named_parameters().size() + 1);
  if (tensors.size() != expected) {
    throw InputError(weights_file.string() + ": holds tensors of another model (" +
                     std::to_string(tensors.size()) + ", expected " + std::to_string(expected) +
                     ")");
  }
  try {
    model->enable_sparse_attention(config, 0, false);  // checks the config before any change
  } catch (const c10::Error& e) {
    throw InputError(config_file.string() + ": " + e.msg());
  }
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < heads.size(); ++l) {
    const std::string layer = "layers." + std::to_string(l) + ".";
    for (auto& p : model->sparse_predictors()[l]->named_parameters()) {
      p.value().copy_(tensors.at(layer + p.key()).to(torch::kFloat32));
    }
    model->set_sparse_heads(l, heads[l]);
  }
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
