// Weight wire format: round trips (any bucket order, tensors split across buckets) and one clear
// InputError for each kind of corruption.
#include "streamrl/dist/weight_wire.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "streamrl/core/errors.h"

namespace streamrl::dist {
namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

Named sample_tensors() {
  torch::manual_seed(3);
  return {{"model.embed_tokens.weight", torch::randn({7, 5})},
          {"model.norm.weight", torch::randn({9}).to(torch::kBFloat16)},
          {"lm_head.weight", torch::randn({2, 3, 4}).to(torch::kHalf)},
          {"scalar", torch::tensor(2.5f)},
          {"empty", torch::zeros({0, 3})}};
}

// Checks the message of the InputError that `f` throws.
template <typename F>
void expect_input_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InputError; expected one mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Rewrites the checksum after a deliberate edit, so the edit itself is what the reader sees.
void reseal(std::string& bucket) {
  const uint32_t crc = crc32(bucket.substr(0, 36) + bucket.substr(kWeightBucketHeaderBytes));
  std::memcpy(bucket.data() + 36, &crc, 4);
}

TEST(WeightWire, Crc32MatchesZlib) { EXPECT_EQ(crc32("123456789"), 0xCBF43926u); }

TEST(WeightWire, RoundTripInAnyOrderWithSplitTensors) {
  const Named tensors = sample_tensors();
  auto buckets = encode_weight_buckets(7, tensors, 128);
  ASSERT_GT(buckets.size(), 3u);  // the 140-byte embedding alone needs two buckets
  for (const auto& b : buckets) EXPECT_LE(b.size(), 128u);
  std::reverse(buckets.begin(), buckets.end());
  WeightAssembler a;
  for (size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_FALSE(a.complete());
    a.add_bucket(buckets[i]);
    EXPECT_EQ(a.buckets_received(), i + 1);
  }
  ASSERT_TRUE(a.complete());
  EXPECT_EQ(a.version(), 7);
  auto out = a.take();
  ASSERT_EQ(out.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(out.count(name)) << name;
    EXPECT_EQ(out[name].scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(out[name].sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(out[name], t)) << name;
  }
  EXPECT_EQ(a.version(), -1);  // take() resets
}

TEST(WeightWire, OneBucketWhenItFitsAndOneForNoTensors) {
  EXPECT_EQ(encode_weight_buckets(1, sample_tensors(), 1 << 20).size(), 1u);
  auto empty = encode_weight_buckets(2, {}, 1 << 20);
  ASSERT_EQ(empty.size(), 1u);
  WeightAssembler a;
  a.add_bucket(empty[0]);
  EXPECT_TRUE(a.complete());
  EXPECT_TRUE(a.take().empty());
}

TEST(WeightWire, EncoderRejectsWhatItCannotCarry) {
  expect_input_error(
      [] {
        encode_weight_buckets(1, {{"ids", torch::zeros({2}, torch::kLong)}}, 4096);
      },
      "supported: F32/F16/BF16");
  expect_input_error(
      [] {
        encode_weight_buckets(1, {{"w", torch::zeros({2})}}, 50);
      },
      "cannot hold tensor 'w'");
  expect_input_error(
      [] {
        encode_weight_buckets(1, {{"w", torch::zeros({2})}, {"w", torch::zeros({2})}}, 4096);
      },
      "repeated");
}

TEST(WeightWire, EachCorruptionIsOneClearError) {
  const auto good = encode_weight_buckets(3, sample_tensors(), 128);
  auto add = [](std::string b) {
    return [b] {
      WeightAssembler a;
      a.add_bucket(b);
    };
  };
  std::string b = good[0];
  b[0] = 'X';
  expect_input_error(add(b), "bad magic");

  b = good[0];
  b.back() ^= 0x40;
  expect_input_error(add(b), "checksum mismatch");

  expect_input_error(add(good[0].substr(0, good[0].size() - 3)), "truncated");
  expect_input_error(add(good[0].substr(0, 12)), "truncated");
  expect_input_error(add(good[0] + "xx"), "too long");

  b = good[0];
  b[4] = 9;  // format version
  expect_input_error(add(b), "format version 9");

  b = good[0];
  const size_t dtype_at = kWeightBucketHeaderBytes + 4 + std::strlen("model.embed_tokens.weight");
  b[dtype_at] = 42;
  reseal(b);
  expect_input_error(add(b), "unknown dtype code 42");

  WeightAssembler a;
  a.add_bucket(good[0]);
  expect_input_error([&] { a.add_bucket(good[0]); }, "duplicate bucket");
  const auto other = encode_weight_buckets(4, sample_tensors(), 128);
  expect_input_error([&] { a.add_bucket(other[1]); }, "expected weight version 3");
}

TEST(WeightWire, RejectedBucketLeavesTheAssemblerUsable) {
  const auto good = encode_weight_buckets(5, sample_tensors(), 128);
  WeightAssembler a;
  std::string bad = good[1];
  bad.back() ^= 1;
  EXPECT_THROW(a.add_bucket(bad), InputError);
  EXPECT_EQ(a.buckets_received(), 0u);
  for (const auto& b : good) a.add_bucket(b);
  EXPECT_TRUE(a.complete());
  EXPECT_EQ(a.take().size(), sample_tensors().size());
}

TEST(WeightWire, HeaderReaderReportsVersionAndPosition) {
  const auto good = encode_weight_buckets(11, sample_tensors(), 128);
  const BucketHeader h = read_bucket_header(good[2]);
  EXPECT_EQ(h.version, 11);
  EXPECT_EQ(h.index, 2u);
  EXPECT_EQ(h.count, good.size());
}

}  // namespace
}  // namespace streamrl::dist
