#include "streamrl/model/checkpoint.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/model/safetensors.h"

namespace streamrl::model {
namespace fs = std::filesystem;

namespace {

std::string shape_str(c10::IntArrayRef shape) {
  std::ostringstream ss;
  ss << shape;
  return ss.str();
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

CausalLM load_model(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw InputError("checkpoint directory not found: " + dir.string());
  ModelConfig config = load_model_config(dir / "config.json");
  CausalLM model(config);
  load_weights(model, read_safetensors_dir(dir), dir.string());
  return model;
}

}  // namespace streamrl::model
