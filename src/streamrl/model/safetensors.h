// Reader and writer for Hugging Face safetensors files and sharded checkpoints
// (model.safetensors.index.json). Written for this project, no external library; the writer lays
// files out exactly as the reference implementation does, so both read each other's output.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace streamrl::model {

// Tensors by name (HF names, e.g. "model.layers.0.self_attn.q_proj.weight").
using TensorMap = std::map<std::string, torch::Tensor>;
// The free-form string map stored under "__metadata__" (transformers writes {"format": "pt"}).
using SafetensorsMetadata = std::map<std::string, std::string>;

inline constexpr const char* kSafetensorsFileName = "model.safetensors";
inline constexpr const char* kSafetensorsIndexFileName = "model.safetensors.index.json";

struct SafetensorsFile {
  TensorMap tensors;
  SafetensorsMetadata metadata;
};

// Reads a whole .safetensors file. Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8,
// BOOL; each tensor keeps its stored dtype (BF16 -> torch::kBFloat16; converting is the caller's
// job) and is CPU, contiguous and owns its memory. Throws InputError with one line naming the file
// (and the tensor) for a missing or unreadable file, a bad header, an unsupported dtype, offsets
// that disagree with shape x dtype, overlapping/gapped/trailing data, or a truncated file.
SafetensorsFile read_safetensors_file(const std::filesystem::path& file);

// The tensors of read_safetensors_file.
TensorMap read_safetensors(const std::filesystem::path& file);

// Only the "__metadata__" map; reads just the header, not the tensor data. Same errors as
// read_safetensors_file for the header.
SafetensorsMetadata read_safetensors_metadata(const std::filesystem::path& file);

// All tensors of a checkpoint directory: `model.safetensors` if present (as transformers prefers
// it), else the shards listed by `model.safetensors.index.json` merged into one map. Throws
// InputError when neither exists, when the index is malformed, names a missing shard (naming the
// shard and the index), or lists a tensor its shard does not hold, or when two shards hold the
// same tensor.
TensorMap read_safetensors_dir(const std::filesystem::path& checkpoint_dir);

// Writes `tensors` (any device, any layout; supported dtypes as above) and, when non-empty,
// `metadata` to `file` through a temporary name and a rename, so a reader never sees a partial
// file. Layout as the reference writer: data ordered by dtype (widest first) then name, so each
// tensor is aligned to its element size; header = "__metadata__" then tensors in data order,
// compact JSON padded with spaces to a multiple of 8 bytes. Throws InputError for an undefined
// tensor or an unsupported dtype (naming the tensor), RuntimeFailure on I/O errors.
void write_safetensors(const std::filesystem::path& file, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata = {});

// Writes a checkpoint directory the way transformers' save_pretrained does: a single
// `model.safetensors` when everything fits in `max_shard_bytes`, otherwise shards
// `model-00001-of-0000N.safetensors` (filled in name order; a tensor larger than the limit gets a
// shard of its own) plus `model.safetensors.index.json` with {"metadata": {"total_size": bytes},
// "weight_map": {name: shard}}. Each file is written atomically; safetensors files and index from
// an earlier save into the same directory that the new save does not use are removed afterwards,
// so read_safetensors_dir never mixes two saves. Errors as write_safetensors; InputError for
// max_shard_bytes <= 0.
void write_safetensors_dir(const std::filesystem::path& checkpoint_dir, const TensorMap& tensors,
                           int64_t max_shard_bytes, const SafetensorsMetadata& metadata = {});

}  // namespace streamrl::model
