#include "streamrl/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "fixtures.h"
#include "run_binary.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::tokenizer {
namespace {

namespace fs = std::filesystem;

class TokenizerFactory : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing_util::fresh_temp_dir("tokenizer_factory_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TokenizerFactory, CharByName) {
  auto tok = make_tokenizer("char");
  EXPECT_EQ(tok->vocab_size(), 100);
  EXPECT_EQ(tok->decode(tok->encode("2+2=4")), "2+2=4");
}

TEST_F(TokenizerFactory, FileOrDirectoryWithConfig) {
  testing::ByteLevelFixture f;
  f.added_tokens = {testing::added_token(300, "<|endoftext|>"),
                    testing::added_token(301, "<|im_end|>")};
  core::write_file_atomic(dir_ / "tokenizer.json", f.json());

  auto from_file = make_tokenizer((dir_ / "tokenizer.json").string());
  EXPECT_EQ(from_file->eos_id(), 300);

  core::write_file_atomic(dir_ / "tokenizer_config.json",
                          R"({"bos_token": null, "eos_token": {"content": "<|im_end|>"},
                              "pad_token": "<|endoftext|>", "model_max_length": 32768})");
  auto from_dir = load_tokenizer(dir_);
  EXPECT_EQ(from_dir->bos_id(), -1);
  EXPECT_EQ(from_dir->eos_id(), 301);
  EXPECT_EQ(from_dir->pad_id(), 300);
  EXPECT_EQ(from_dir->encode("hi<|im_end|>"), (std::vector<int32_t>{104, 105, 301}));
}

TEST_F(TokenizerFactory, MissingFilesAreInputErrors) {
  EXPECT_THROW(make_tokenizer((dir_ / "nope.json").string()), InputError);
  try {
    load_tokenizer(dir_);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "no tokenizer.json in directory " + dir_.string());
  }
}

TEST_F(TokenizerFactory, MalformedConfigIsInputError) {
  core::write_file_atomic(dir_ / "tokenizer.json", testing::ByteLevelFixture().json());
  core::write_file_atomic(dir_ / "tokenizer_config.json", "{\"bos_token\": ");
  EXPECT_THROW(load_tokenizer(dir_), InputError);
}

}  // namespace
}  // namespace streamrl::tokenizer
