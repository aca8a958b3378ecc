// Weight wire format: encoder, header reader and assembler (layout in weight_wire.h).
#include "streamrl/dist/weight_wire.h"

#include <torch/torch.h>

#include <array>
#include <bit>
#include <cstring>

#include "streamrl/core/byte_codec.h"
#include "streamrl/core/errors.h"

namespace streamrl::dist {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the weight wire format stores raw tensor bytes in little-endian order");

constexpr char kMagic[4] = {'S', 'R', 'L', 'W'};
constexpr size_t kChecksumOffset = 36;  // the header's last field; it covers [0, 36) + payload
constexpr int kMaxDims = 8;
constexpr size_t kMaxNameBytes = 1 << 16;

// Slicing-by-8 tables: table[0] is the classic byte table, table[s] advances s more zero bytes.
constexpr std::array<std::array<uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s) {
    for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}
constexpr auto kCrcTables = make_crc_tables();

uint32_t crc32_update(uint32_t crc, const char* data, size_t n) {
  const auto& t = kCrcTables;
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t bucket_checksum(std::string_view bucket) {
  uint32_t crc = crc32_update(0, bucket.data(), kChecksumOffset);
  return crc32_update(crc, bucket.data() + kWeightBucketHeaderBytes,
                      bucket.size() - kWeightBucketHeaderBytes);
}

uint8_t dtype_code(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return 1;
    case torch::kHalf:
      return 2;
    case torch::kBFloat16:
      return 3;
    default:
      return 0;
  }
}

torch::ScalarType dtype_of_code(uint8_t code, const std::string& name) {
  switch (code) {
    case 1:
      return torch::kFloat;
    case 2:
      return torch::kHalf;
    case 3:
      return torch::kBFloat16;
    default:
      throw InputError("weight bucket: tensor '" + name + "' has unknown dtype code " +
                       std::to_string(code) + " (known: 1 F32, 2 F16, 3 BF16)");
  }
}

// A bucket comes from another process over the network: running off its end is bad input.
core::ByteReader bucket_reader(std::string_view bytes, size_t start) {
  return core::ByteReader(bytes, "weight bucket bytes", start, core::ByteSource::kInput);
}

size_t descriptor_bytes(const std::string& name, int64_t ndim) {
  return 4 + name.size() + 2 + 8 * static_cast<size_t>(ndim) + 16;
}

struct Entry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t total = 0;  // bytes of the whole tensor
  uint64_t offset = 0;
  uint64_t length = 0;
  const char* data = nullptr;
};

Entry read_entry(core::ByteReader& r) {
  Entry e;
  const uint32_t name_len = r.get<uint32_t>();
  if (name_len == 0 || name_len > kMaxNameBytes) {
    throw InputError("weight bucket: tensor name length " + std::to_string(name_len) +
                     " is outside [1, " + std::to_string(kMaxNameBytes) + "]");
  }
  e.name = r.view(name_len);
  e.dtype = dtype_of_code(r.get<uint8_t>(), e.name);
  const uint8_t ndim = r.get<uint8_t>();
  if (ndim > kMaxDims) {
    throw InputError("weight bucket: tensor '" + e.name + "' has " + std::to_string(ndim) +
                     " dimensions, more than " + std::to_string(kMaxDims));
  }
  e.total = c10::elementSize(e.dtype);
  for (int d = 0; d < ndim; ++d) {
    const int64_t dim = r.get<int64_t>();
    if (dim < 0 || (dim > 0 && e.total > (uint64_t{1} << 62) / static_cast<uint64_t>(dim))) {
      throw InputError("weight bucket: tensor '" + e.name + "' has an invalid dimension " +
                       std::to_string(dim));
    }
    e.shape.push_back(dim);
    e.total *= static_cast<uint64_t>(dim);
  }
  e.offset = r.get<uint64_t>();
  e.length = r.get<uint64_t>();
  if (e.offset > e.total || e.length > e.total - e.offset) {
    throw InputError("weight bucket: chunk [" + std::to_string(e.offset) + ", +" +
                     std::to_string(e.length) + ") lies outside tensor '" + e.name + "' of " +
                     std::to_string(e.total) + " bytes");
  }
  e.data = r.view(e.length).data();
  return e;
}

}  // namespace

uint32_t crc32(std::string_view bytes) { return crc32_update(0, bytes.data(), bytes.size()); }

std::vector<std::string> encode_weight_buckets(
    int64_t version, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    size_t max_bucket_bytes) {
  // 1. Check every tensor and plan the cut: (tensor, offset, length) chunks per bucket, each bucket
  // filled greedily up to max_bucket_bytes.
  struct Chunk {
    size_t tensor;
    uint64_t offset, length;
  };
  std::vector<torch::Tensor> host(tensors.size());
  std::set<std::string> names;
  std::vector<std::vector<Chunk>> plan(1);
  size_t used = kWeightBucketHeaderBytes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty() || name.size() > kMaxNameBytes || !names.insert(name).second) {
      throw InputError("encode_weight_buckets: tensor name '" + name +
                       "' is empty, too long or repeated");
    }
    if (dtype_code(t.scalar_type()) == 0 || t.dim() > kMaxDims) {
      throw InputError("encode_weight_buckets: tensor '" + name + "' is " +
                       std::string(c10::toString(t.scalar_type())) + " with " +
                       std::to_string(t.dim()) + " dims; supported: F32/F16/BF16, up to " +
                       std::to_string(kMaxDims) + " dims");
    }
    if (t.is_cpu()) {
      host[i] = t.detach().contiguous();
    } else {
      // Device weights come down through page-locked memory (a direct DMA, no bounce buffer).
      host[i] = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
      host[i].copy_(t.detach());
    }
    const uint64_t total = host[i].nbytes();
    const size_t desc = descriptor_bytes(name, t.dim());
    if (kWeightBucketHeaderBytes + desc + 1 > max_bucket_bytes) {
      throw InputError("encode_weight_buckets: max_bucket_bytes " +
                       std::to_string(max_bucket_bytes) + " cannot hold tensor '" + name +
                       "' (needs at least " + std::to_string(kWeightBucketHeaderBytes + desc + 1) +
                       ")");
    }
    uint64_t offset = 0;
    do {
      if (used + desc + (total > offset ? 1 : 0) > max_bucket_bytes) {
        plan.emplace_back();
        used = kWeightBucketHeaderBytes;
      }
      const uint64_t length = std::min<uint64_t>(total - offset, max_bucket_bytes - used - desc);
      plan.back().push_back({i, offset, length});
      used += desc + length;
      offset += length;
    } while (offset < total);
  }

  // 2. Serialise each bucket and seal it with its checksum.
  std::vector<std::string> buckets;
  for (size_t b = 0; b < plan.size(); ++b) {
    core::ByteWriter w;
    w.append({kMagic, 4});
    w.put<uint32_t>(kWeightWireFormat);
    w.put<int64_t>(version);
    w.put<uint32_t>(static_cast<uint32_t>(b));
    w.put<uint32_t>(static_cast<uint32_t>(plan.size()));
    w.put<uint32_t>(static_cast<uint32_t>(plan[b].size()));
    w.put<uint64_t>(0);  // payload bytes, patched below
    w.put<uint32_t>(0);  // checksum, patched below
    for (const Chunk& c : plan[b]) {
      const auto& [name, t] = tensors[c.tensor];
      w.put<uint32_t>(static_cast<uint32_t>(name.size()));
      w.append(name);
      w.put<uint8_t>(dtype_code(t.scalar_type()));
      w.put<uint8_t>(static_cast<uint8_t>(t.dim()));
      for (int64_t d : t.sizes()) w.put<int64_t>(d);
      w.put<uint64_t>(c.offset);
      w.put<uint64_t>(c.length);
      w.append({static_cast<const char*>(host[c.tensor].data_ptr()) + c.offset, c.length});
    }
    std::string out = w.take();
    const uint64_t payload = out.size() - kWeightBucketHeaderBytes;
    std::memcpy(out.data() + 28, &payload, 8);
    const uint32_t crc = bucket_checksum(out);
    std::memcpy(out.data() + kChecksumOffset, &crc, 4);
    buckets.push_back(std::move(out));
  }
  return buckets;
}

BucketHeader read_bucket_header(std::string_view bytes) {
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    throw InputError("not a weight bucket (bad magic; expected \"SRLW\")");
  }
  if (bytes.size() < kWeightBucketHeaderBytes) {
    throw InputError("weight bucket is truncated (" + std::to_string(bytes.size()) +
                     " bytes, the header alone is " + std::to_string(kWeightBucketHeaderBytes) +
                     ")");
  }
  core::ByteReader r = bucket_reader(bytes, 4);
  const uint32_t format = r.get<uint32_t>();
  if (format != kWeightWireFormat) {
    throw InputError("weight bucket has format version " + std::to_string(format) +
                     "; this build reads version " + std::to_string(kWeightWireFormat));
  }
  BucketHeader h;
  h.version = r.get<int64_t>();
  h.index = r.get<uint32_t>();
  h.count = r.get<uint32_t>();
  h.entries = r.get<uint32_t>();
  const uint64_t payload = r.get<uint64_t>();
  if (h.index >= h.count) {
    throw InputError("weight bucket index " + std::to_string(h.index) + " is not below its count " +
                     std::to_string(h.count));
  }
  if (payload != bytes.size() - kWeightBucketHeaderBytes) {
    throw InputError(
        "weight bucket " + std::to_string(h.index) + " is " +
        (payload > bytes.size() - kWeightBucketHeaderBytes ? "truncated" : "too long") +
        " (header says " + std::to_string(payload) + " payload bytes, got " +
        std::to_string(bytes.size() - kWeightBucketHeaderBytes) + ")");
  }
  return h;
}

void WeightAssembler::add_bucket(std::string_view bytes) {
  // 1. Header, checksum and membership in this version's set of buckets.
  const BucketHeader h = read_bucket_header(bytes);
  const std::string id = "weight bucket " + std::to_string(h.index) + "/" +
                         std::to_string(h.count) + " of v" + std::to_string(h.version);
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + kChecksumOffset, 4);
  if (bucket_checksum(bytes) != stored_crc) throw InputError(id + ": checksum mismatch (corrupt)");
  if (version_ >= 0 && h.version != version_) {
    throw InputError(id + ": expected weight version " + std::to_string(version_));
  }
  if (version_ >= 0 && h.count != count_) {
    throw InputError(id + ": expected " + std::to_string(count_) + " buckets in all");
  }
  if (received_.count(h.index)) throw InputError(id + ": duplicate bucket");

  // 2. Parse every entry and check it against the chunks already received, before changing state.
  core::ByteReader r = bucket_reader(bytes, kWeightBucketHeaderBytes);
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (uint32_t i = 0; i < h.entries; ++i) {
    Entry e = read_entry(r);
    if (!names.insert(e.name).second) {
      throw InputError(id + ": tensor '" + e.name + "' appears twice");
    }
    auto it = tensors_.find(e.name);
    if (it != tensors_.end()) {
      const Partial& p = it->second;
      if (p.tensor.scalar_type() != e.dtype || p.tensor.sizes() != c10::IntArrayRef(e.shape)) {
        throw InputError(id + ": tensor '" + e.name + "' disagrees with earlier chunks on dtype " +
                         "or shape");
      }
      auto next = p.chunks.lower_bound(e.offset);
      const bool overlaps_next = next != p.chunks.end() && next->first < e.offset + e.length;
      const bool overlaps_prev =
          next != p.chunks.begin() && std::prev(next)->first + std::prev(next)->second > e.offset;
      if (overlaps_next || overlaps_prev) {
        throw InputError(id + ": chunk at byte " + std::to_string(e.offset) + " of tensor '" +
                         e.name + "' overlaps an earlier chunk");
      }
    }
    entries.push_back(std::move(e));
  }
  if (r.pos() != bytes.size()) {
    throw InputError(id + ": " + std::to_string(bytes.size() - r.pos()) +
                     " trailing bytes after the last entry");
  }

  // 3. Commit.
  version_ = h.version;
  count_ = h.count;
  received_.insert(h.index);
  for (const Entry& e : entries) {
    auto [it, fresh] = tensors_.try_emplace(e.name);
    Partial& p = it->second;
    if (fresh) p.tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    std::memcpy(static_cast<char*>(p.tensor.data_ptr()) + e.offset, e.data, e.length);
    p.chunks.emplace(e.offset, e.length);
    p.covered += e.length;
  }
}

bool WeightAssembler::complete() const { return count_ > 0 && received_.size() == count_; }

std::map<std::string, torch::Tensor> WeightAssembler::take() {
  if (!complete()) {
    throw InputError("weight update v" + std::to_string(version_) + " is incomplete (" +
                     std::to_string(received_.size()) + " of " + std::to_string(count_) +
                     " buckets)");
  }
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, p] : tensors_) {
    if (p.covered != p.tensor.nbytes()) {
      throw InputError("weight update v" + std::to_string(version_) + ": tensor '" + name +
                       "' received " + std::to_string(p.covered) + " of " +
                       std::to_string(p.tensor.nbytes()) + " bytes");
    }
    out.emplace(name, std::move(p.tensor));
  }
  *this = WeightAssembler();
  return out;
}

}  // namespace streamrl::dist
