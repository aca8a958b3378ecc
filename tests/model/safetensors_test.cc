// safetensors reader/writer: byte layout against hand-built files, dtype round trips, every kind of
// corrupt input, and sharded checkpoint directories.
#include "streamrl/model/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "input_error.h"
#include "run_binary.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;

// A fresh directory per test, so tests may run in parallel.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::fresh_temp_dir(
        "safetensors_" +
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a safetensors file from its parts: the 8-byte little-endian length, header, data.
  fs::path write_raw(const std::string& header, const std::string& data,
                     const std::string& name = "raw.safetensors") {
    std::string bytes;
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    fs::path file = dir_ / name;
    core::write_file_atomic(file, bytes + header + data);
    return file;
  }

  fs::path dir_;
};

using testing_util::input_error;

void expect_same(const TensorMap& expected, const TensorMap& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [name, t] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    const torch::Tensor& got = actual.at(name);
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(got.device().is_cpu()) << name;
    EXPECT_TRUE(got.is_contiguous()) << name;
    EXPECT_TRUE(torch::equal(got, t)) << name;
  }
}

TEST_F(SafetensorsTest, WritesTheReferenceByteLayout) {
  // The reference writer orders data by dtype (I64 before F32 before F16), then by name, puts
  // "__metadata__" first and pads the compact JSON header with spaces to a multiple of 8.
  TensorMap tensors = {
      {"a", torch::tensor({1.0}, torch::kFloat16)},     // F16 [1]: 0x3C00
      {"b", torch::tensor({1.0f, -2.0f})},              // F32 [2]
      {"c", torch::tensor(int64_t{7}, torch::kInt64)},  // I64 []
  };
  write_safetensors(dir_ / "x.safetensors", tensors, {{"format", "pt"}});

  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("a":{"dtype":"F16","shape":[1],"data_offsets":[16,18]}}       )";
  ASSERT_EQ(header.size(), 200u);
  std::string expected("\xC8\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x07\0\0\0\0\0\0\0", 8);  // 7 as int64
  expected += std::string("\0\0\x80\x3F", 4);        // 1.0f
  expected += std::string("\0\0\0\xC0", 4);          // -2.0f
  expected += std::string("\x00\x3C", 2);            // 1.0 as half
  EXPECT_EQ(core::read_file(dir_ / "x.safetensors"), expected);
}

TEST_F(SafetensorsTest, WritesNoMetadataKeyWithoutMetadata) {
  write_safetensors(dir_ / "x.safetensors", {{"w", torch::zeros({2})}});
  std::string bytes = core::read_file(dir_ / "x.safetensors");
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x38\0\0\0\0\0\0\0", 8));  // 56-byte header
  EXPECT_EQ(bytes.substr(8, 56), R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  )");
  EXPECT_TRUE(read_safetensors_metadata(dir_ / "x.safetensors").empty());
}

TEST_F(SafetensorsTest, ReadsAHandBuiltFile) {
  // The example of the reference documentation: an unpadded 60-byte header, I32 [2, 2].
  fs::path file = write_raw(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})",
                            std::string("\1\0\0\0\2\0\0\0\3\0\0\0\xFF\xFF\xFF\xFF", 16));
  TensorMap t = read_safetensors(file);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(torch::equal(t.at("test"), torch::tensor({1, 2, 3, -1}, torch::kInt32).view({2, 2})));
}

TEST_F(SafetensorsTest, ReadsBf16AndF16Bits) {
  // BF16 0x3F80 = 1.0, 0x40C0 = 6.0, 0x4049 = 3.140625; F16 0x3C00 = 1.0, 0xC000 = -2.0.
  fs::path file = write_raw(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                            R"("w":{"dtype":"BF16","shape":[3],"data_offsets":[4,10]}})",
                            std::string("\x00\x3C\x00\xC0\x80\x3F\xC0\x40\x49\x40", 10));
  TensorMap t = read_safetensors(file);
  EXPECT_EQ(t.at("w").scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(t.at("w").to(torch::kFloat32), torch::tensor({1.0f, 6.0f, 3.140625f})));
  EXPECT_EQ(t.at("h").scalar_type(), torch::kFloat16);
  EXPECT_TRUE(torch::equal(t.at("h").to(torch::kFloat32), torch::tensor({1.0f, -2.0f})));
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndShape) {
  const std::vector<torch::ScalarType> dtypes = {
      torch::kFloat64, torch::kFloat32, torch::kFloat16, torch::kBFloat16, torch::kInt64,
      torch::kInt32,   torch::kInt16,   torch::kInt8,    torch::kUInt8,    torch::kBool};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0, 3}, {5}, {2, 3, 4}};
  torch::manual_seed(0);
  TensorMap tensors;
  for (auto dtype : dtypes) {
    for (const auto& shape : shapes) {
      torch::Tensor t = torch::randn(shape) * 50;
      t = dtype == torch::kBool ? (t > 0) : t.to(dtype);
      tensors[std::string(c10::toString(dtype)) + "/" + std::to_string(shape.size()) + "d"] = t;
    }
  }
  // Non-contiguous and autograd inputs are written as their values.
  tensors["transposed"] = torch::arange(6, torch::kFloat32).view({2, 3}).t();
  tensors["leaf"] = torch::ones({2}, torch::requires_grad());
  write_safetensors(dir_ / "all.safetensors", tensors, {{"format", "pt"}, {"note", "é ü"}});

  SafetensorsFile read = read_safetensors_file(dir_ / "all.safetensors");
  tensors["leaf"] = tensors["leaf"].detach();
  expect_same(tensors, read.tensors);
  SafetensorsMetadata expected_metadata = {{"format", "pt"}, {"note", "é ü"}};
  EXPECT_EQ(read.metadata, expected_metadata);
  EXPECT_EQ(read_safetensors_metadata(dir_ / "all.safetensors"), expected_metadata);
}

TEST_F(SafetensorsTest, RoundTripsAnEmptyMap) {
  write_safetensors(dir_ / "empty.safetensors", {});
  EXPECT_TRUE(read_safetensors(dir_ / "empty.safetensors").empty());
}

TEST_F(SafetensorsTest, RejectsMissingOrTooShortFiles) {
  EXPECT_NE(
      input_error([&] { read_safetensors(dir_ / "nope.safetensors"); }).find("file not found"),
      std::string::npos);
  core::write_file_atomic(dir_ / "short.safetensors", "abc");
  std::string msg = input_error([&] { read_safetensors(dir_ / "short.safetensors"); });
  EXPECT_NE(msg.find((dir_ / "short.safetensors").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 bytes, fewer than the 8-byte header length"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, RejectsAHeaderLongerThanTheFile) {
  fs::path file = dir_ / "long.safetensors";
  core::write_file_atomic(file, std::string("\xFF\0\0\0\0\0\0\0{}", 10));
  std::string msg = input_error([&] { read_safetensors(file); });
  EXPECT_NE(msg.find("header length 255 exceeds the 2 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, RejectsAHeaderThatIsNotAJsonObject) {
  fs::path file = write_raw("{\"x\": [1,", "");
  std::string msg = input_error([&] { read_safetensors(file); });
  EXPECT_NE(msg.find(file.string() + ": safetensors header is not valid JSON"), std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  file = write_raw("[1, 2]  ", "");
  msg = input_error([&] { read_safetensors(file); });
  EXPECT_NE(msg.find("safetensors header must be a JSON object, got a array"), std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, RejectsAnUnsupportedDtype) {
  fs::path file = write_raw(R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab");
  EXPECT_EQ(input_error([&] { read_safetensors(file); }),
            "unsupported dtype 'F8_E4M3' for tensor 'x' in " + file.string());
}

TEST_F(SafetensorsTest, RejectsMalformedTensorEntries) {
  struct Case {
    std::string header;
    std::string expected;  // substring of the message
  };
  const std::vector<Case> cases = {
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
       "tensor 'x' has data_offsets [8, 0] with end < begin"},
      {R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       "tensor 'x' has data_offsets [0, 8] (8 bytes) but shape [3] of F32 needs 12 bytes"},
      {R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
       "tensor 'x' needs 'shape' as a list of non-negative integers, got [-2]"},
      {R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", "tensor 'x' needs 'shape'"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})",
       "tensor 'x' needs 'data_offsets' as [begin, end] byte offsets, got [0]"},
      {R"({"x":{"shape":[2],"data_offsets":[0,8]}})", "tensor 'x' has no string 'dtype'"},
      {R"({"x":[1,2]})", "tensor 'x' must map to an object"},
      {R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
       "tensor 'x' has shape [4294967296, 4294967296] whose size overflows"},
      {R"({"__metadata__":{"step":3},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       "'__metadata__' value of 'step' must be a string, got 3"},
  };
  for (const auto& c : cases) {
    fs::path file = write_raw(c.header, std::string(8, '\0'));
    std::string msg = input_error([&] { read_safetensors(file); });
    EXPECT_NE(msg.find(file.string() + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "got: " << msg;
  }
}

TEST_F(SafetensorsTest, RejectsTruncatedData) {
  fs::path file =
      write_raw(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  EXPECT_EQ(input_error([&] { read_safetensors(file); }),
            "file " + file.string() +
                " is truncated: tensor 'x' needs bytes [0,16) but the data section has 8 bytes");
}

TEST_F(SafetensorsTest, RejectsOverlapsGapsAndTrailingBytes) {
  fs::path file = write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0'));
  EXPECT_NE(input_error([&] { read_safetensors(file); })
                .find("tensor 'b' starts at data byte 4 but the tensors before it end at byte 8 "
                      "(overlap)"),
            std::string::npos);

  file = write_raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                   std::string(12, '\0'));
  EXPECT_NE(input_error([&] { read_safetensors(file); }).find("(gap)"), std::string::npos);

  file =
      write_raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(6, '\0'));
  EXPECT_NE(input_error([&] {
              read_safetensors(file);
            }).find("the data section has 6 bytes but its tensors end at byte 4"),
            std::string::npos);
}

TEST_F(SafetensorsTest, RejectsTensorsItCannotWrite) {
  fs::path file = dir_ / "bad.safetensors";
  std::string msg = input_error([&] {
    write_safetensors(file, {{"z", torch::zeros({2}, torch::kComplexFloat)}});
  });
  EXPECT_NE(msg.find("cannot write tensor 'z' to " + file.string()), std::string::npos) << msg;
  EXPECT_NE(input_error([&] {
              write_safetensors(file, {{"u", torch::Tensor()}});
            }).find("tensor 'u'"),
            std::string::npos);
  EXPECT_NE(input_error([&] {
              write_safetensors(file, {{"__metadata__", torch::zeros({1})}});
            }).find("reserved"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(SafetensorsTest, ShardedDirectoryRoundTripsAndReplacesAnEarlierSave) {
  TensorMap tensors;
  for (int i = 0; i < 5; ++i) {
    tensors["layer." + std::to_string(i)] = torch::full({10}, static_cast<float>(i));  // 40 bytes
  }
  tensors["big"] = torch::zeros({64});  // 256 bytes: larger than a shard, so alone in one
  write_safetensors_dir(dir_, tensors, 100, {{"format", "pt"}});

  // Name order: big | layer.0 layer.1 | layer.2 layer.3 | layer.4.
  for (const char* shard :
       {"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
        "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir_ / shard)) << shard;
    EXPECT_EQ(read_safetensors_metadata(dir_ / shard).at("format"), "pt");
  }
  auto index = nlohmann::json::parse(core::read_file(dir_ / kSafetensorsIndexFileName));
  EXPECT_EQ(index["metadata"]["total_size"], 456);
  EXPECT_EQ(index["weight_map"]["big"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.1"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["layer.4"], "model-00004-of-00004.safetensors");
  EXPECT_FALSE(fs::exists(dir_ / kSafetensorsFileName));
  expect_same(tensors, read_safetensors_dir(dir_));

  // A save that fits one file leaves no shard or index of the earlier save behind.
  core::write_file_atomic(dir_ / "tokenizer.json", "{}");
  write_safetensors_dir(dir_, tensors, 1 << 20);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors", "tokenizer.json"}));
  expect_same(tensors, read_safetensors_dir(dir_));
}

TEST_F(SafetensorsTest, ShardedDirectoryErrorsNameTheShardAndIndex) {
  TensorMap tensors = {{"a", torch::zeros({4})}, {"b", torch::ones({4})}};
  write_safetensors_dir(dir_, tensors, 16);
  const std::string index = (dir_ / kSafetensorsIndexFileName).string();

  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  EXPECT_EQ(input_error([&] { read_safetensors_dir(dir_); }),
            "shard 'model-00002-of-00002.safetensors' listed in " + index + " is missing");

  core::write_file_atomic(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                "b": "model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(input_error([&] { read_safetensors_dir(dir_); }),
            index +
                " maps tensor 'b' to shard 'model-00001-of-00002.safetensors', which does not "
                "contain it");

  core::write_file_atomic(index, R"({"metadata": {}})");
  EXPECT_NE(input_error([&] { read_safetensors_dir(dir_); }).find("needs a non-empty 'weight_map'"),
            std::string::npos);

  core::write_file_atomic(index, "{not json");
  EXPECT_NE(input_error([&] { read_safetensors_dir(dir_); }).find(index + " is not valid JSON"),
            std::string::npos);
}

TEST_F(SafetensorsTest, ShardedDirectoryRejectsATensorInTwoShards) {
  write_safetensors(dir_ / "s1.safetensors", {{"a", torch::zeros({1})}});
  write_safetensors(dir_ / "s2.safetensors", {{"a", torch::zeros({1})}, {"b", torch::ones({1})}});
  core::write_file_atomic(dir_ / kSafetensorsIndexFileName,
                          R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  EXPECT_NE(
      input_error([&] { read_safetensors_dir(dir_); }).find("tensor 'a' is in more than one shard"),
      std::string::npos);
}

TEST_F(SafetensorsTest, DirectoryWithoutWeightsIsAnInputError) {
  EXPECT_EQ(input_error([&] { read_safetensors_dir(dir_); }),
            dir_.string() + " has neither model.safetensors nor model.safetensors.index.json");
  EXPECT_NE(input_error([&] {
              read_safetensors_dir(dir_ / "absent");
            }).find("checkpoint directory not found"),
            std::string::npos);
  EXPECT_NE(input_error([&] { write_safetensors_dir(dir_, {}, 0); }).find("max_shard_bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace streamrl::model
