// Tests of chat_template: exact rendered prompts of both formats and the template selection rule,
// on small tokenizer_config.json files written to a temporary directory.
#include "streamrl/tokenizer/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};

TEST(ChatTemplateTest, RendersChatMl) {
  EXPECT_EQ(render_chat(ChatFormat::kChatMl, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatFormat::kChatMl, {{"user", "a\nb"}}, false),
            "<|im_start|>user\na\nb<|im_end|>\n");
}

TEST(ChatTemplateTest, RendersLlama3) {
  EXPECT_EQ(render_chat(ChatFormat::kLlama3, kConversation, true),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(ChatFormat::kLlama3, {{"user", "x"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplateTest, DefaultSystemOnlyWhenNoneGiven) {
  const ChatTemplate qwen25{ChatFormat::kChatMl, kQwen25DefaultSystem};
  EXPECT_EQ(render_chat(qwen25, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(qwen25, kConversation, true),
            render_chat(ChatFormat::kChatMl, kConversation, true));
}

TEST(ChatTemplateTest, RejectsUnknownRole) {
  try {
    render_chat(ChatFormat::kChatMl, {{"tool", "x"}}, true);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'tool'"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateTest, ParsesMessages) {
  const Json j = Json::parse(R"([{"role": "system", "content": "s", "name": "ignored"},
                                 {"role": "user", "content": ""}])");
  EXPECT_EQ(parse_messages(j, "req"), (std::vector<ChatMessage>{{"system", "s"}, {"user", ""}}));
}

TEST(ChatTemplateTest, MalformedMessagesAreOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"role": "user"})", "req: messages must be a JSON array"},
      {R"([1])", "req: message 0 is not a JSON object"},
      {R"([{"role": "user", "content": "a"}, {"content": "b"}])",
       "req: message 1 needs a string \"role\""},
      {R"([{"role": "user"}])", "req: message 0 needs a string \"content\""},
      {R"([{"role": "user", "content": [{"type": "text", "text": "a"}]}])",
       "req: message 0 needs a string \"content\""},
      {R"([{"role": "tool", "content": "a"}])",
       "req: message 0 has unsupported role 'tool' (supported: system, user, assistant)"},
  };
  for (const auto& [text, want] : cases) {
    try {
      parse_messages(Json::parse(text), "req");
      ADD_FAILURE() << "expected InputError for " << text;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
}

class ChatTemplateSelectTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_chat_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_text(const std::string& text) {
    std::ofstream(dir_ / "tokenizer_config.json") << text;
  }
  void write_config(const Json& j) { write_text(j.dump()); }
  std::string error() {
    try {
      load_chat_template(dir_);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected InputError";
    return "";
  }
  fs::path dir_;
};

// Abbreviated from the real templates; only the marker strings matter to the rule.
const char* kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}";
const char* kQwen25Template =
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}";
const char* kLlama3Template =
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' %}";

TEST_F(ChatTemplateSelectTest, RecognisesChatMlAndLlama3) {
  write_config(Json{{"chat_template", kQwen2Template}});
  EXPECT_EQ(select_chat_format(dir_), ChatFormat::kChatMl);
  EXPECT_EQ(load_chat_template(dir_).default_system, "");
  write_config(Json{{"chat_template", kQwen25Template}});
  EXPECT_EQ(select_chat_format(dir_), ChatFormat::kChatMl);
  EXPECT_EQ(load_chat_template(dir_).default_system, kQwen25DefaultSystem);
  write_config(Json{{"chat_template", kLlama3Template}});
  EXPECT_EQ(select_chat_format(dir_), ChatFormat::kLlama3);
}

TEST_F(ChatTemplateSelectTest, ListOfTemplatesUsesDefault) {
  write_config(
      Json{{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "x"}},
                                          {{"name", "default"}, {"template", kLlama3Template}}})}});
  EXPECT_EQ(select_chat_format(dir_), ChatFormat::kLlama3);
  write_config(Json{
      {"chat_template", Json::array({{{"name", "tool_use"}, {"template", kLlama3Template}}})}});
  EXPECT_EQ(error(), "no chat template in " + (dir_ / "tokenizer_config.json").string());
}

TEST_F(ChatTemplateSelectTest, Errors) {
  const std::string file = (dir_ / "tokenizer_config.json").string();
  EXPECT_EQ(error(), "no chat template in " + file);
  write_config(Json{{"eos_token", "</s>"}});
  EXPECT_EQ(error(), "no chat template in " + file);
  write_config(Json{{"chat_template", "{{ bos_token }}[INST] {{ message['content'] }} [/INST]"}});
  EXPECT_EQ(error(), "unsupported chat template in " + file + " (supported: ChatML, Llama-3)");
  write_config(Json{{"chat_template", 3}});
  EXPECT_EQ(error(), file + ": \"chat_template\" must be a string or a list");
  write_text("{not json");
  EXPECT_EQ(error().rfind(file + " is not valid JSON", 0), 0u);
}

}  // namespace
}  // namespace streamrl::tokenizer
