// safetensors format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data
// section; offsets are relative to its start. Validation mirrors the reference implementation.
#include "streamrl/model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// Tensor bytes are copied as they are; a big-endian host would need byte swapping.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

struct DtypeInfo {
  std::string_view name;
  torch::ScalarType type;
  uint64_t itemsize;  // bytes per element
};

// In the order of the reference implementation's Dtype enum: its writer orders data by this rank
// (descending), which aligns every tensor to its element size, and ours must match it byte for
// byte. U16/U32/U64 have no libtorch type and F8 variants are not used by this model family.
constexpr std::array<DtypeInfo, 10> kDtypes = {{
    {"BOOL", torch::kBool, 1},
    {"U8", torch::kUInt8, 1},
    {"I8", torch::kInt8, 1},
    {"I16", torch::kInt16, 2},
    {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2},
    {"I32", torch::kInt32, 4},
    {"F32", torch::kFloat32, 4},
    {"F64", torch::kFloat64, 8},
    {"I64", torch::kInt64, 8},
}};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const DtypeInfo* find_dtype(torch::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

size_t dtype_rank(const DtypeInfo* d) { return static_cast<size_t>(d - kDtypes.data()); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A read-only file descriptor with positioned reads, so the header can be read without the data
// and each tensor's bytes land directly in the tensor's own storage.
class InputFile {
 public:
  explicit InputFile(const fs::path& path) : path_(path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError("file not found: " + path.string());
    if (fs::is_directory(path, ec)) {
      throw InputError("expected a file, got a directory: " + path.string());
    }
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError("cannot open " + path.string() + ": " + std::strerror(errno));
    off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) {
      ::close(fd_);
      throw InputError("cannot read " + path.string() + ": " + std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(end);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* dst, uint64_t n) const {
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t got =
          ::pread(fd_, out, std::min<uint64_t>(n, 1ULL << 30), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        throw RuntimeFailure("cannot read " + path_.string() + ": " + std::strerror(errno));
      }
      if (got == 0) throw InputError("file " + path_.string() + " shrank while being read");
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }

 private:
  fs::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes
};

struct TensorEntry {
  std::string name;
  const DtypeInfo* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the data section, [begin, end)
  uint64_t end = 0;
};

struct Header {
  uint64_t data_start = 0;           // byte offset of the data section in the file: 8 + N
  std::vector<TensorEntry> entries;  // in data order
  SafetensorsMetadata metadata;
};

// The JSON parser types every non-negative integer literal as unsigned.
bool is_non_negative_int(const json& v) { return v.is_number_unsigned(); }

TensorEntry parse_entry(const std::string& name, const json& value, const std::string& file) {
  std::string where = file + ": tensor '" + name + "'";
  if (!value.is_object()) throw InputError(where + " must map to an object, got " + value.dump());
  TensorEntry e;
  e.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string())
    throw InputError(where + " has no string 'dtype'");
  e.dtype = find_dtype(dtype->get<std::string>());
  if (!e.dtype) {
    throw InputError("unsupported dtype '" + dtype->get<std::string>() + "' for tensor '" + name +
                     "' in " + file);
  }

  auto shape = value.find("shape");
  bool shape_ok = shape != value.end() && shape->is_array();
  if (shape_ok) {
    for (const auto& d : *shape) {
      if (!is_non_negative_int(d) ||
          d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        shape_ok = false;
        break;
      }
      e.shape.push_back(d.get<int64_t>());
    }
  }
  if (!shape_ok) {
    throw InputError(where + " needs 'shape' as a list of non-negative integers, got " +
                     (shape == value.end() ? "nothing" : shape->dump()));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !is_non_negative_int((*offsets)[0]) || !is_non_negative_int((*offsets)[1])) {
    throw InputError(where + " needs 'data_offsets' as [begin, end] byte offsets, got " +
                     (offsets == value.end() ? "nothing" : offsets->dump()));
  }
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.end < e.begin) throw InputError(where + " has data_offsets " + range + " with end < begin");

  uint64_t nbytes = e.dtype->itemsize;
  for (int64_t d : e.shape) {
    if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes)) {
      throw InputError(where + " has shape " + shape_text(e.shape) + " whose size overflows");
    }
  }
  if (e.end - e.begin != nbytes) {
    throw InputError(where + " has data_offsets " + range + " (" + std::to_string(e.end - e.begin) +
                     " bytes) but shape " + shape_text(e.shape) + " of " +
                     std::string(e.dtype->name) + " needs " + std::to_string(nbytes) + " bytes");
  }
  return e;
}

Header read_header(const InputFile& in, const fs::path& path) {
  const std::string file = path.string();
  if (in.size() < 8) {
    throw InputError(file + " is not a safetensors file: it has " + std::to_string(in.size()) +
                     " bytes, fewer than the 8-byte header length");
  }
  uint64_t n = 0;  // header length, bytes
  in.read_at(0, &n, 8);
  if (n > in.size() - 8) {
    throw InputError(file + " is not a safetensors file or is truncated: header length " +
                     std::to_string(n) + " exceeds the " + std::to_string(in.size() - 8) +
                     " bytes after the length field");
  }
  std::string text(n, '\0');
  in.read_at(8, text.data(), n);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(file + ": safetensors header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) {
    throw InputError(file + ": safetensors header must be a JSON object, got a " +
                     std::string(header.type_name()));
  }

  Header h;
  h.data_start = 8 + n;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") {
      h.entries.push_back(parse_entry(key, value, file));
      continue;
    }
    if (!value.is_object()) throw InputError(file + ": '__metadata__' must be a JSON object");
    for (const auto& [mk, mv] : value.items()) {
      if (!mv.is_string()) {
        throw InputError(file + ": '__metadata__' value of '" + mk + "' must be a string, got " +
                         mv.dump());
      }
      h.metadata[mk] = mv.get<std::string>();
    }
  }

  const uint64_t data_size = in.size() - h.data_start;  // bytes
  for (const auto& e : h.entries) {
    if (e.end > data_size) {
      throw InputError("file " + file + " is truncated: tensor '" + e.name + "' needs bytes [" +
                       std::to_string(e.begin) + "," + std::to_string(e.end) +
                       ") but the data section has " + std::to_string(data_size) + " bytes");
    }
  }
  // Like the reference reader: the tensors must tile the data section exactly, since an overlap,
  // a hole or trailing bytes means the header and the data disagree.
  std::sort(h.entries.begin(), h.entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;  // bytes
  for (const auto& e : h.entries) {
    if (e.begin != covered) {
      throw InputError(file + ": tensor '" + e.name + "' starts at data byte " +
                       std::to_string(e.begin) + " but the tensors before it end at byte " +
                       std::to_string(covered) + (e.begin < covered ? " (overlap)" : " (gap)"));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    throw InputError(file + ": the data section has " + std::to_string(data_size) +
                     " bytes but its tensors end at byte " + std::to_string(covered));
  }
  return h;
}

struct PreparedTensor {
  const std::string* name;
  const DtypeInfo* dtype;
  torch::Tensor data;  // CPU, contiguous
  uint64_t nbytes;
};

// Writes through "<file>.tmp.<pid>" and a rename like core::write_file_atomic, but streams the
// tensors from their own storage instead of first assembling the whole file in one string.
void write_streamed_atomic(const fs::path& file, const std::string& header,
                           const std::vector<PreparedTensor>& tensors) {
  if (file.has_parent_path()) fs::create_directories(file.parent_path());
  fs::path tmp = file;
  tmp += ".tmp." + std::to_string(::getpid());
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw RuntimeFailure("cannot write " + tmp.string() + ": " + std::strerror(errno));
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& t : tensors) {
      out.write(static_cast<const char*>(t.data.data_ptr()),
                static_cast<std::streamsize>(t.nbytes));
    }
    out.flush();
    if (!out)
      throw RuntimeFailure("write failed for " + tmp.string() + ": " + std::strerror(errno));
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw RuntimeFailure("cannot rename " + tmp.string() + " to " + file.string() + ": " +
                         ec.message());
  }
}

bool is_checkpoint_weight_file(const std::string& name) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return name == kSafetensorsFileName || name == kSafetensorsIndexFileName ||
         std::regex_match(name, kShard);
}

}  // namespace

SafetensorsFile read_safetensors_file(const fs::path& file) {
  InputFile in(file);
  Header h = read_header(in, file);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (const auto& e : h.entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    if (e.end > e.begin) in.read_at(h.data_start + e.begin, t.data_ptr(), e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

TensorMap read_safetensors(const fs::path& file) { return read_safetensors_file(file).tensors; }

SafetensorsMetadata read_safetensors_metadata(const fs::path& file) {
  InputFile in(file);
  return read_header(in, file).metadata;
}

TensorMap read_safetensors_dir(const fs::path& checkpoint_dir) {
  std::error_code ec;
  if (!fs::is_directory(checkpoint_dir, ec)) {
    throw InputError("checkpoint directory not found: " + checkpoint_dir.string());
  }
  fs::path single = checkpoint_dir / kSafetensorsFileName;
  if (fs::exists(single, ec)) return read_safetensors(single);
  fs::path index_path = checkpoint_dir / kSafetensorsIndexFileName;
  if (!fs::exists(index_path, ec)) {
    throw InputError(checkpoint_dir.string() + " has neither " + kSafetensorsFileName + " nor " +
                     kSafetensorsIndexFileName);
  }
  const std::string index_name = index_path.string();
  json index;
  try {
    index = json::parse(core::read_file(index_path));
  } catch (const json::parse_error& e) {
    throw InputError(index_name + " is not valid JSON: " + e.what());
  }
  auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() || !weight_map->is_object() ||
      weight_map->empty()) {
    throw InputError(index_name + " needs a non-empty 'weight_map' object {tensor: shard file}");
  }
  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      throw InputError(index_name + ": shard of tensor '" + name + "' must be a file name, got " +
                       shard.dump());
    }
    names_by_shard[shard.get<std::string>()].push_back(name);
  }

  TensorMap merged;
  for (const auto& [shard, names] : names_by_shard) {
    fs::path shard_path = checkpoint_dir / shard;
    if (!fs::exists(shard_path, ec)) {
      throw InputError("shard '" + shard + "' listed in " + index_name + " is missing");
    }
    TensorMap tensors = read_safetensors(shard_path);
    for (const auto& name : names) {
      if (!tensors.count(name)) {
        throw InputError(index_name + " maps tensor '" + name + "' to shard '" + shard +
                         "', which does not contain it");
      }
    }
    for (auto& [name, t] : tensors) {
      if (!merged.emplace(name, std::move(t)).second) {
        throw InputError("tensor '" + name + "' is in more than one shard listed by " + index_name +
                         " (again in '" + shard + "')");
      }
    }
  }
  return merged;
}

void write_safetensors(const fs::path& file, const TensorMap& tensors,
                       const SafetensorsMetadata& metadata) {
  std::vector<PreparedTensor> prepared;
  prepared.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    std::string where = "cannot write tensor '" + name + "' to " + file.string();
    if (name == "__metadata__") throw InputError(where + ": the name is reserved by the format");
    if (!t.defined()) throw InputError(where + ": the tensor is undefined");
    const DtypeInfo* dtype = find_dtype(t.scalar_type());
    if (!dtype) {
      throw InputError(where + ": dtype " + std::string(c10::toString(t.scalar_type())) +
                       " has no safetensors equivalent here");
    }
    torch::Tensor data = t.detach().to(torch::kCPU).contiguous();
    prepared.push_back({&name, dtype, data, static_cast<uint64_t>(data.numel()) * dtype->itemsize});
  }
  std::stable_sort(prepared.begin(), prepared.end(),
                   [](const PreparedTensor& a, const PreparedTensor& b) {
                     return dtype_rank(a.dtype) > dtype_rank(b.dtype);  // names already sorted
                   });

  // ordered_json keeps insertion order, which must be "__metadata__" then data order, and each
  // entry's keys in the reference order dtype, shape, data_offsets.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;  // bytes into the data section
  for (const auto& t : prepared) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = t.dtype->name;
    entry["shape"] = t.data.sizes().vec();
    entry["data_offsets"] = {offset, offset + t.nbytes};
    header[*t.name] = std::move(entry);
    offset += t.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::type_error& e) {
    throw InputError("cannot write " + file.string() +
                     ": a tensor name or metadata string is not valid UTF-8");
  }
  // The data section starts 8-byte aligned, as the reference writer guarantees.
  text.append((8 - text.size() % 8) % 8, ' ');
  write_streamed_atomic(file, text, prepared);
}

void write_safetensors_dir(const fs::path& checkpoint_dir, const TensorMap& tensors,
                           int64_t max_shard_bytes, const SafetensorsMetadata& metadata) {
  if (max_shard_bytes <= 0) {
    throw InputError("max_shard_bytes must be positive, got " + std::to_string(max_shard_bytes));
  }
  std::vector<TensorMap> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& [name, t] : tensors) {
    int64_t nbytes = t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
    if (!shards.back().empty() && shard_bytes + nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += nbytes;
  }

  std::set<std::string> written;
  if (shards.size() == 1) {
    write_safetensors(checkpoint_dir / kSafetensorsFileName, shards[0], metadata);
    written.insert(kSafetensorsFileName);
  } else {
    json weight_map = json::object();
    int64_t total_size = 0;  // bytes of tensor data over all shards
    for (size_t i = 0; i < shards.size(); ++i) {
      char shard_name[64];
      std::snprintf(shard_name, sizeof shard_name, "model-%05zu-of-%05zu.safetensors", i + 1,
                    shards.size());
      write_safetensors(checkpoint_dir / shard_name, shards[i], metadata);
      written.insert(shard_name);
      for (const auto& [name, t] : shards[i]) {
        weight_map[name] = shard_name;
        total_size += t.numel() * static_cast<int64_t>(t.element_size());
      }
    }
    json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    core::write_file_atomic(checkpoint_dir / kSafetensorsIndexFileName, index.dump(2) + "\n");
    written.insert(kSafetensorsIndexFileName);
  }

  for (const auto& entry : fs::directory_iterator(checkpoint_dir)) {
    std::string name = entry.path().filename().string();
    if (is_checkpoint_weight_file(name) && !written.count(name)) fs::remove(entry.path());
  }
}

}  // namespace streamrl::model
