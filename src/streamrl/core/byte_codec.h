// Flat byte messages between the processes of one run (ranks, trainer and instances): trivially
// copyable values, vectors of them and raw bytes, in host byte order (both ends run the same build
// on like machines).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "streamrl/core/errors.h"

namespace streamrl::core {

class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  // The element count, then the elements.
  template <class T>
  void put(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void append(std::string_view bytes) { out_.append(bytes); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Who wrote the bytes, which decides what running off their end is: a fault of this run
// (RuntimeFailure) or bad input from outside it (InputError).
enum class ByteSource { kRun, kInput };

// Reads what a ByteWriter wrote, in the same order, from byte `start`; running off the end throws
// (see ByteSource) naming `what` ("sample bytes") and the byte. `in` must outlive the reader.
class ByteReader {
 public:
  ByteReader(std::string_view in, const char* what, size_t start = 0,
             ByteSource source = ByteSource::kRun)
      : in_(in), what_(what), source_(source), pos_(start) {
    if (start > in.size()) fail();
  }
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (in_.size() - pos_) / sizeof(T)) fail();
    std::vector<T> v(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  // The next `n` bytes in place (no copy).
  std::string_view view(size_t n) {
    if (n > in_.size() - pos_) fail();
    pos_ += n;
    return in_.substr(pos_ - n, n);
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }

 private:
  void take(void* dst, size_t n) {
    if (n > in_.size() - pos_) fail();
    if (n > 0) std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  [[noreturn]] void fail() const {
    const std::string message = std::string(what_) + " are truncated or malformed at byte " +
                                std::to_string(pos_) + " of " + std::to_string(in_.size());
    if (source_ == ByteSource::kInput) throw InputError(message);
    throw RuntimeFailure(message);
  }
  std::string_view in_;
  const char* what_;
  ByteSource source_;
  size_t pos_;
};

}  // namespace streamrl::core
