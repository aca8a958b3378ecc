// The weight wire format: named tensors cut into versioned, checksummed buckets, so a weight update
// (trainer -> SGS instance) travels in bounded messages and a torn or corrupt message
// is caught before it reaches a model. Used over HTTP (`POST /update_weights`) and by any channel
// that moves bytes.
//
// A bucket is little-endian: a 40-byte header (magic "SRLW", u32 format version = 1, i64 weight
// version, u32 bucket index, u32 bucket count, u32 entry count, u64 payload bytes, u32 CRC-32 of
// header bytes [0, 36) then the payload; zlib's crc32) followed by the entries. An entry is
// u32 name length, name, u8 dtype (1 F32, 2 F16, 3 BF16), u8 ndim, i64 dims[ndim], u64 byte offset
// and u64 byte length of this chunk of the tensor's data, then the chunk's raw bytes (host order,
// row-major). A tensor larger than a bucket is split into chunks across consecutive buckets.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace streamrl::dist {

inline constexpr uint32_t kWeightWireFormat = 1;
inline constexpr size_t kWeightBucketHeaderBytes = 40;

// CRC-32 (IEEE 802.3, the polynomial of zlib's and Python's zlib.crc32).
uint32_t crc32(std::string_view bytes);

// Encodes `tensors` (any device and layout; F32, F16 or BF16) as buckets of at most
// `max_bucket_bytes` bytes each, in the given order. No tensors give one empty bucket. Throws
// InputError for another dtype, an empty or duplicate name, more than 8 dimensions, or a
// `max_bucket_bytes` too small to hold the header, one entry's descriptor and one data byte.
std::vector<std::string> encode_weight_buckets(
    int64_t version, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    size_t max_bucket_bytes);

struct BucketHeader {
  int64_t version = 0;
  uint32_t index = 0;
  uint32_t count = 0;
  uint32_t entries = 0;
};

// The header of `bytes`, checked for magic, format, index < count and length; the checksum is
// checked by WeightAssembler::add_bucket, not here. Throws InputError.
BucketHeader read_bucket_header(std::string_view bytes);

// Collects the buckets of one weight version, in any order, into whole tensors. Not thread-safe:
// one caller at a time (the HTTP server serialises updates).
class WeightAssembler {
 public:
  // Verifies and adds one bucket. Throws InputError with one line for bad magic, another format
  // version, truncated or trailing bytes, a checksum mismatch, a bucket of another weight version
  // or bucket count than the first one, a duplicate bucket, a bad dtype or shape, or a chunk that
  // lies outside its tensor, overlaps another, or disagrees with earlier chunks on dtype or shape.
  // A rejected bucket leaves the assembler unchanged.
  void add_bucket(std::string_view bytes);

  // All `bucket_count()` buckets have arrived.
  bool complete() const;
  // Weight version of the buckets so far; -1 before the first one.
  int64_t version() const { return version_; }
  size_t buckets_received() const { return received_.size(); }
  size_t bucket_count() const { return count_; }

  // The assembled tensors (CPU, contiguous, as encoded), and a reset to the empty state. Requires
  // complete(); throws InputError if a tensor's chunks do not cover all of its bytes.
  std::map<std::string, torch::Tensor> take();

 private:
  struct Partial {
    torch::Tensor tensor;
    std::map<uint64_t, uint64_t> chunks;  // byte offset -> length, non-overlapping
    uint64_t covered = 0;                 // bytes received
  };

  int64_t version_ = -1;
  uint32_t count_ = 0;
  std::set<uint32_t> received_;
  std::map<std::string, Partial> tensors_;
};

}  // namespace streamrl::dist
