// Tests of PromptEncoder: chat records rendered with the checkpoint's template (one BOS, exact
// text), SFT targets ending with the end-of-turn token, stop tokens from generation_config.json,
// and one-line errors naming the record when the checkpoint has no usable template. Checkpoint
// directories hold only the tokenizer-side files the tests write.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../tokenizer/fixtures.h"
#include "streamrl/core/errors.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tasks/dataset.h"

namespace streamrl::rl {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using tokenizer::testing::added_token;

// Special tokens after the 256 byte tokens of the fixture (no merges: one token per byte).
constexpr int32_t kBeginOfText = 256, kEotId = 257, kStartHeader = 258, kEndHeader = 259,
                  kImStart = 260, kImEnd = 261, kEndOfText = 262;

class PromptEncoderTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("streamrl_prompt_encoder_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "ckpt");
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path ckpt() const { return dir_ / "ckpt"; }

  // A checkpoint's tokenizer files; `config` is tokenizer_config.json (null: none).
  std::unique_ptr<tokenizer::Tokenizer> write_tokenizer(const json& config) {
    tokenizer::testing::ByteLevelFixture f;
    f.pre_tokenizer = tokenizer::testing::split_then_byte_level(tokenizer::testing::kQwen2Pattern);
    f.added_tokens = json::array();
    int id = kBeginOfText;
    for (const char* t : {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                          "<|end_header_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
      f.added_tokens.push_back(added_token(id++, t));
    }
    std::ofstream(ckpt() / "tokenizer.json") << f.json();
    if (!config.is_null()) std::ofstream(ckpt() / "tokenizer_config.json") << config.dump();
    return tokenizer::load_tokenizer(ckpt());
  }

  fs::path write_data(const std::string& text) {
    const fs::path path = dir_ / "data.jsonl";
    std::ofstream(path) << text;
    return path;
  }

  // The ids of `text` with one token per byte (special tokens written out are matched first).
  std::vector<int32_t> bytes(const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }

  fs::path dir_;
};

// Llama-3.1's template (each content trimmed, BOS from the template) and a Qwen2.5-style ChatML
// template with its default system message.
const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
const char* kQwen25Template =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] "
    "+ '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba "
    "Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages "
    "%}{%- if message.role != 'system' %}{{- '<|im_start|>' + message.role + '\n' + "
    "message.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt "
    "%}{{- '<|im_start|>assistant\n' }}{%- endif %}";

const char* kChatRecords =
    "{\"prompt\": \"1+1=\", \"answer\": 2}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, "
    "{\"role\": \"assistant\", \"content\": \"4\"}], \"answer\": 4}\n";

TEST_F(PromptEncoderTest, PlainPromptGetsOneBos) {
  auto tok = write_tokenizer({{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}});
  ASSERT_EQ(tok->bos_id(), kBeginOfText);
  std::vector<int32_t> want = {kBeginOfText};
  for (int32_t id : bytes("hi")) want.push_back(id);
  EXPECT_EQ(encode_prompt(*tok, "hi"), want);
  EXPECT_EQ(encode_prompt(*tok, "<|begin_of_text|>hi"), want);  // no second BOS
}

TEST_F(PromptEncoderTest, Llama3ChatRecordIsRenderedWithOneBosAndEndsWithEotId) {
  auto tok = write_tokenizer({{"bos_token", "<|begin_of_text|>"},
                              {"eos_token", "<|eot_id|>"},
                              {"chat_template", kLlama3Template}});
  std::ofstream(ckpt() / "generation_config.json")
      << R"({"eos_token_id": [262, 257], "temperature": 0.6})";
  const tasks::JsonlTask task(write_data(kChatRecords), "numeric");
  const PromptEncoder enc = PromptEncoder::for_task(*tok, ckpt(), task);
  ASSERT_TRUE(enc.has_chat_template());

  std::vector<int32_t> want = {kBeginOfText, kStartHeader};
  for (int32_t id : bytes("user")) want.push_back(id);
  want.push_back(kEndHeader);
  for (int32_t id : bytes("\n\n2+2?")) want.push_back(id);
  want.push_back(kEotId);
  want.push_back(kStartHeader);
  for (int32_t id : bytes("assistant")) want.push_back(id);
  want.push_back(kEndHeader);
  for (int32_t id : bytes("\n\n")) want.push_back(id);
  EXPECT_EQ(enc.prompt_ids(task.problem(1)), want);
  EXPECT_EQ(enc.target(task.problem(1)).ids, (std::vector<int32_t>{'4', kEotId}));

  // The plain record of the same dataset keeps the plain rule.
  EXPECT_EQ(enc.prompt_ids(task.problem(0)).front(), kBeginOfText);
  // The tokenizer's EOS first, then the file's other EOS ids, each once.
  EXPECT_EQ(enc.stop_ids(), (std::vector<int32_t>{kEotId, kEndOfText}));
}

TEST_F(PromptEncoderTest, Qwen25ChatRecordGetsDefaultSystemAndNoBos) {
  auto tok = write_tokenizer(
      {{"bos_token", nullptr}, {"eos_token", "<|im_end|>"}, {"chat_template", kQwen25Template}});
  std::ofstream(ckpt() / "generation_config.json") << R"({"eos_token_id": [261, 262]})";
  const tasks::JsonlTask task(write_data(kChatRecords), "numeric");
  const PromptEncoder enc = PromptEncoder::for_task(*tok, ckpt(), task);
  EXPECT_EQ(enc.prompt_ids(task.problem(1)),
            tok->encode("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n"));
  EXPECT_EQ(enc.prompt_ids(task.problem(1)).front(), kImStart);
  EXPECT_EQ(enc.target(task.problem(1)).ids, (std::vector<int32_t>{'4', kImEnd}));
  EXPECT_EQ(enc.stop_ids(), (std::vector<int32_t>{kImEnd, kEndOfText}));
}

TEST_F(PromptEncoderTest, PlainDatasetsNeedNoTemplate) {
  auto tok = write_tokenizer(nullptr);
  const tasks::JsonlTask task(write_data("{\"prompt\": \"1+1=\", \"answer\": 2}\n"), "numeric");
  const PromptEncoder enc = PromptEncoder::for_task(*tok, ckpt(), task);
  EXPECT_FALSE(enc.has_chat_template());
  // Without tokenizer_config.json the EOS is found by its common name.
  EXPECT_EQ(enc.stop_ids(), (std::vector<int32_t>{kEndOfText}));
  EXPECT_EQ(enc.target(task.problem(0)).ids, (std::vector<int32_t>{'2', kEndOfText}));
}

std::string encoder_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_F(PromptEncoderTest, ChatRecordWithoutTemplateIsOneLineErrorNamingTheRecord) {
  const fs::path data = write_data(kChatRecords);
  const tasks::JsonlTask task(data, "numeric");
  const std::string where =
      data.string() + ":2: a chat \"messages\" record needs the model's chat template, but ";
  auto tok = write_tokenizer(nullptr);
  EXPECT_EQ(encoder_error([&] { PromptEncoder::for_task(*tok, ckpt(), task); }),
            where + "no chat template in " + (ckpt() / "tokenizer_config.json").string());
  tok = write_tokenizer({{"chat_template", "{% if %}[INST]{% endif %}"}});
  EXPECT_EQ(encoder_error([&] { PromptEncoder::for_task(*tok, ckpt(), task); }),
            where + (ckpt() / "tokenizer_config.json").string() +
                ": chat template line 1: unexpected end of expression");
  EXPECT_EQ(encoder_error([&] { PromptEncoder::for_task(*tok, "", task); }),
            where + "the model is not loaded from a checkpoint");
  EXPECT_EQ(encoder_error([&] { PromptEncoder(*tok).prompt_ids(task.problem(1)); }),
            data.string() +
                ":2: a chat \"messages\" record needs the model's chat template, but none is "
                "loaded");
}

TEST_F(PromptEncoderTest, TemplateWhoseEndOfTurnTokenIsMissingIsAnError) {
  tokenizer::testing::ByteLevelFixture f;  // bytes only: no <|im_end|>
  std::ofstream(ckpt() / "tokenizer.json") << f.json();
  std::ofstream(ckpt() / "tokenizer_config.json")
      << json{{"chat_template",
               "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"}}
             .dump();
  auto tok = tokenizer::load_tokenizer(ckpt());
  EXPECT_EQ(encoder_error([&] { PromptEncoder::for_chat(*tok, ckpt()); }),
            (ckpt() / "tokenizer.json").string() +
                " has no token <|im_end|>, which its chat template ends turns with");
}

}  // namespace
}  // namespace streamrl::rl
