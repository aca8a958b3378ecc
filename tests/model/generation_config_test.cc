// Tests of generation_config: real-looking generation_config.json files, absence, and one-line
// errors for malformed fields.
#include "streamrl/model/generation_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "streamrl/core/errors.h"

namespace streamrl::model {
namespace {
namespace fs = std::filesystem;

class GenerationConfigTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_gencfg_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(dir_ / "generation_config.json") << text; }
  std::string error(const std::string& text) {
    write(text);
    try {
      load_generation_config(dir_);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected InputError for " << text;
    return "";
  }
  std::string file() const { return (dir_ / "generation_config.json").string(); }
  fs::path dir_;
};

TEST_F(GenerationConfigTest, AbsentFileGivesDefaults) {
  EXPECT_EQ(load_generation_config(dir_), GenerationDefaults{});
  EXPECT_TRUE(GenerationDefaults{}.do_sample);
}

TEST_F(GenerationConfigTest, ReadsQwen25Style) {
  write(R"({"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
            "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
            "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})");
  GenerationDefaults g = load_generation_config(dir_);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_FLOAT_EQ(g.temperature.value(), 0.7f);
  EXPECT_FLOAT_EQ(g.top_p.value(), 0.8f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.max_new_tokens.has_value());
  EXPECT_TRUE(g.do_sample);
}

TEST_F(GenerationConfigTest, ReadsSingleEosAndNulls) {
  write(R"({"eos_token_id": 2, "do_sample": false, "max_new_tokens": 64, "temperature": null})");
  GenerationDefaults g = load_generation_config(dir_);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_FALSE(g.temperature.has_value());
  EXPECT_FALSE(g.do_sample);
}

TEST_F(GenerationConfigTest, MalformedIsOneLineErrorNamingFileAndField) {
  EXPECT_EQ(error("{oops").rfind(file() + " is not valid JSON", 0), 0u);
  EXPECT_EQ(error("[1]"), file() + " is not a JSON object");
  EXPECT_EQ(error(R"({"eos_token_id": "2"})"),
            file() +
                ": field \"eos_token_id\" must be a non-negative integer or a list of them, "
                "got \"2\"");
  EXPECT_EQ(error(R"({"eos_token_id": [1, -1]})"),
            file() +
                ": field \"eos_token_id\" must be a non-negative integer or a list of them, "
                "got [1,-1]");
  EXPECT_EQ(error(R"({"temperature": "hot"})"),
            file() + ": field \"temperature\" must be a number, got \"hot\"");
  EXPECT_EQ(error(R"({"temperature": -1})"),
            file() + ": field \"temperature\" must be >= 0, got -1");
  EXPECT_EQ(error(R"({"top_p": 1.5})"), file() + ": field \"top_p\" must be in (0, 1], got 1.5");
  EXPECT_EQ(error(R"({"top_k": 2.5})"), file() + ": field \"top_k\" must be an integer, got 2.5");
  EXPECT_EQ(error(R"({"max_new_tokens": 0})"),
            file() + ": field \"max_new_tokens\" must be >= 1, got 0");
  EXPECT_EQ(error(R"({"do_sample": 1})"),
            file() + ": field \"do_sample\" must be true or false, got 1");
}

}  // namespace
}  // namespace streamrl::model
