// Checkpoint directories in Hugging Face layout: config.json + model.safetensors (or sharded with
// model.safetensors.index.json) + tokenizer.json, plus whatever extra files a trainer adds.
// Saving writes a sibling temporary directory and renames it into place, so a crash never leaves a
// half-written checkpoint under the final name.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "streamrl/model/model_config.h"
#include "streamrl/model/transformer.h"

namespace streamrl::model {

// Writes `dir` atomically: config.json, model.safetensors (F32), tokenizer.json (given text), and
// `extra_files` (name -> bytes); a model with sparse attention also its predictors and sparse heads
// (sparse_attention.json and sparse_attention.safetensors). Throws RuntimeFailure on I/O errors.
void save_checkpoint(const std::filesystem::path& dir, CausalLM& model,
                     const std::string& tokenizer_json,
                     const std::map<std::string, std::string>& extra_files = {});

// The Hugging Face side files of checkpoint `dir` that a fine-tuned copy must keep to behave the
// same (tokenizer_config.json with its chat template, or chat_template.jinja where newer
// checkpoints keep it, generation_config.json with its stop ids and sampling defaults,
// special_tokens_map.json), name -> bytes, for save_checkpoint's extra_files.
// Files that are absent are left out; `dir` "" gives none.
std::map<std::string, std::string> checkpoint_side_files(const std::filesystem::path& dir);

// Sparse attention as save_checkpoint wrote it into `dir`: enables it on `model` with the saved
// predictors and sparse heads and returns true; false when `dir` has none. InputError naming the
// file when it is corrupt or for another model.
bool load_sparse_attention(CausalLM& model, const std::filesystem::path& dir);

// Reads config.json and the weights of `dir` into a new model (F16/BF16 weights converted to F32),
// with its sparse attention when it has one.
// Throws InputError naming the file for a missing/corrupt file, and naming the tensor and both
// shapes for a missing or mis-shaped tensor. Unexpected extra tensors are an error too.
CausalLM load_model(const std::filesystem::path& dir);

// The checks of load_weights without copying anything: every tensor of the model present with its
// shape and a float dtype, no unexpected tensor, and for a tied model an 'lm_head.weight' only when
// it equals the 'model.embed_tokens.weight' of `weights` (the model will use that one). Throws
// InputError naming the tensor; `source` names where the weights came from.
void check_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                   const std::string& source);

// Copies `weights` (HF name -> tensor, any float dtype) into `model` after check_weights, so a
// rejected set leaves the model unchanged. `source` names where the weights came from.
void load_weights(CausalLM& model, const std::map<std::string, torch::Tensor>& weights,
                  const std::string& source);

// DSV's predictors, sparse-head flags and config as tensors named "sparse_attention.*", to travel
// with named_weights() to generation engines (weight sync); empty when `model` has no sparse
// attention. check_weights checks such tensors and load_weights installs them (enabling sparse
// attention on the receiving model).
std::map<std::string, torch::Tensor> sparse_attention_weights(CausalLM& model);

// A model of `model`'s config and gating holding a copy of its weights, on the CPU in fp32 (place
// it where it runs). `source` names the copy in errors.
CausalLM copy_model(CausalLM& model, const std::string& source);

}  // namespace streamrl::model
