// Tests of chat_template: the real templates of eight model families rendered byte for byte as the
// reference renderer (@huggingface/jinja, see tests/tools/render_chat_templates.mjs) rendered them
// into tests/data/chat_templates/renders.json; end-of-turn markers; where templates are loaded
// from.
#include "streamrl/tokenizer/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::tokenizer {
namespace {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kDataDir = fs::path(STREAMRL_TEST_DATA_DIR) / "chat_templates";

std::vector<ChatMessage> messages_of(const Json& c) {
  std::vector<ChatMessage> out;
  for (const Json& m : c["messages"]) {
    ChatMessage msg{m["role"], m["content"]};
    for (const auto& [k, v] : m.items()) {
      if (k != "role" && k != "content") msg.fields[k] = v;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ChatOptions options_of(const Json& c) {
  ChatOptions o;
  o.add_generation_prompt = c["add_generation_prompt"];
  o.tools = c.value("tools", Json());
  Json kwargs = c.value("kwargs", Json::object());
  if (kwargs.contains("enable_thinking")) {
    o.enable_thinking = kwargs["enable_thinking"].get<bool>();
    kwargs.erase("enable_thinking");
  }
  o.variables = kwargs;
  return o;
}

TEST(ChatTemplateReference, EveryFamilyRendersByteForByte) {
  const Json cases = Json::parse(core::read_file(kDataDir / "cases.json"));
  const Json renders = Json::parse(core::read_file(kDataDir / "renders.json"));
  ASSERT_GE(renders.size(), 6u);
  int compared = 0, refused = 0;
  for (const auto& [family, expected] : renders.items()) {
    const ChatTemplate t = load_chat_template(kDataDir / family);
    for (const Json& c : cases) {
      const std::string name = c["name"];
      const Json& want = expected.at(name);
      SCOPED_TRACE(family + "/" + name);
      if (want.is_object()) {
        // The template rejects the conversation: so must ours, with the template's message.
        try {
          t.render(messages_of(c), options_of(c));
          ADD_FAILURE() << "expected the template to raise " << want["error"];
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find(want["error"].get<std::string>()), std::string::npos)
              << e.what();
        }
        ++refused;
        continue;
      }
      EXPECT_EQ(t.render(messages_of(c), options_of(c)), want.get<std::string>());
      ++compared;
    }
  }
  EXPECT_GE(compared, 80);
  EXPECT_GE(refused, 3);
}

std::string render_case(const std::string& family, const std::string& name) {
  const Json cases = Json::parse(core::read_file(kDataDir / "cases.json"));
  for (const Json& c : cases) {
    if (c["name"] == name) {
      return load_chat_template(kDataDir / family).render(messages_of(c), options_of(c));
    }
  }
  ADD_FAILURE() << "no case " << name;
  return "";
}

TEST(ChatTemplateReference, Llama3TrimsEveryMessage) {
  const std::string out = render_case("llama3", "system_whitespace");
  EXPECT_NE(out.find("<|end_header_id|>\n\nHi<|eot_id|>"), std::string::npos) << out;
  EXPECT_NE(out.find("\n\nSum 3 and 4.<|eot_id|>"), std::string::npos) << out;
  EXPECT_EQ(out.rfind("<|begin_of_text|>", 0), 0u);
}

TEST(ChatTemplateReference, Qwen3Thinking) {
  // Earlier turns lose their reasoning; enable_thinking=false writes the empty think block.
  EXPECT_EQ(render_case("qwen3", "thinking_history"),
            "<|im_start|>user\n2*3?<|im_end|>\n<|im_start|>assistant\n6<|im_end|>\n"
            "<|im_start|>user\nAnd 2*4?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render_case("qwen3", "thinking_disabled"),
      "<|im_start|>user\nQuick: 5-2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_case("qwen3", "thinking_enabled"),
            "<|im_start|>user\nQuick: 5-2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateReference, EndOfTurnMarkers) {
  const std::vector<std::pair<std::string, std::string>> want = {
      {"llama3", "<|eot_id|>"},    {"llama3_2", "<|eot_id|>"},
      {"qwen2_5", "<|im_end|>"},   {"qwen3", "<|im_end|>"},
      {"gemma3", "<end_of_turn>"}, {"mistral", "</s>"},
      {"phi4", "<|im_end|>"},      {"deepseek_v3", "<｜end▁of▁sentence｜>"}};
  for (const auto& [family, marker] : want) {
    EXPECT_EQ(load_chat_template(kDataDir / family).end_of_turn(), marker) << family;
  }
}

TEST(ChatTemplateTest, ParsesMessagesKeepingOtherFields) {
  const Json j = Json::parse(R"([{"role": "system", "content": "s", "name": "n"},
                                 {"role": "tool", "content": ""}])");
  const std::vector<ChatMessage> got = parse_messages(j, "req");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].role, "system");
  EXPECT_EQ(got[0].fields, Json({{"name", "n"}}));
  // ordered_json keeps the fields in the order given.
  const Json ordered = Json::parse(R"([{"role": "assistant", "content": "", "z": 1, "a": 2}])");
  EXPECT_EQ(parse_messages(ordered, "req")[0].fields.begin().key(), "z");
  EXPECT_EQ(got[1], (ChatMessage{"tool", ""}));
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
      {R"([{"role": "robot", "content": "a"}])",
       "req: message 0 has unsupported role 'robot' (supported: system, user, assistant, tool)"},
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

class ChatTemplateLoadTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("streamrl_chat_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_config(const Json& j) { std::ofstream(dir_ / "tokenizer_config.json") << j.dump(); }
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

const char* kTurns =
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}";

TEST_F(ChatTemplateLoadTest, SpecialTokensMayBeAddedTokenObjects) {
  write_config({{"chat_template", std::string("{{ bos_token }}") + kTurns},
                {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                {"eos_token", "</s>"}});
  const ChatTemplate t = load_chat_template(dir_);
  EXPECT_EQ(render_chat(t, {{"user", "a"}}, true), "<s>[user]a</s>");
  EXPECT_EQ(t.end_of_turn(), "</s>");
}

TEST_F(ChatTemplateLoadTest, ListOfTemplatesUsesDefaultAndJinjaFileIsTheFallback) {
  write_config({{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                               {{"name", "default"}, {"template", "D"}}})}});
  EXPECT_EQ(render_chat(load_chat_template(dir_), {}, true), "D");
  write_config({{"eos_token", "<e>"}});
  std::ofstream(dir_ / "chat_template.jinja") << kTurns << "\n";
  EXPECT_EQ(render_chat(load_chat_template(dir_), {{"user", "x"}}, false), "[user]x<e>");
}

TEST_F(ChatTemplateLoadTest, Errors) {
  const std::string file = (dir_ / "tokenizer_config.json").string();
  EXPECT_EQ(error(), "no chat template in " + file);
  write_config({{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "x"}}})}});
  EXPECT_EQ(error(), "no chat template in " + file);
  write_config({{"chat_template", 3}});
  EXPECT_EQ(error(), file + ": \"chat_template\" must be a string or a list");
  write_config({{"chat_template", "{% for m in messages %}"}});
  EXPECT_EQ(error(), file + ": chat template line 1: missing {% endfor %}");
  std::ofstream(dir_ / "tokenizer_config.json") << "{";
  EXPECT_NE(error().find(file + " is not valid JSON"), std::string::npos);
}

TEST_F(ChatTemplateLoadTest, RaisedExceptionNamesTheFileAndLine) {
  write_config({{"chat_template",
                 "{% if messages[0].role != 'user' %}\n{{ raise_exception('user first') }}\n"
                 "{% endif %}"}});
  const ChatTemplate t = load_chat_template(dir_);
  try {
    render_chat(t, {{"system", "s"}}, true);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir_ / "tokenizer_config.json").string() + ": chat template line 2: user first");
  }
}

}  // namespace
}  // namespace streamrl::tokenizer
