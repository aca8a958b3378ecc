// Loading a checkpoint's chat template and rendering conversations with it (see chat_template.h).
#include "streamrl/tokenizer/chat_template.h"

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/tokenizer/jinja/template.h"

namespace streamrl::tokenizer {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// An assistant reply no template alters, to find what the template writes after a reply.
constexpr const char* kProbeReply = "streamrl-probe-reply";

bool is_supported_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

// The "chat_template" text of tokenizer_config.json, or "" when there is none.
std::string chat_template_text(const Json& config, const std::string& source) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (!entry.is_object()) {
        throw InputError(source + ": \"chat_template\" list entries must be objects");
      }
      auto name = entry.find("name");
      auto text = entry.find("template");
      if (name == entry.end() || !name->is_string() || text == entry.end() || !text->is_string()) {
        throw InputError(source +
                         ": \"chat_template\" list entries need string \"name\" and \"template\"");
      }
      if (name->get<std::string>() == "default") return text->get<std::string>();
    }
    return "";
  }
  throw InputError(source + ": \"chat_template\" must be a string or a list");
}

// bos_token, eos_token, unk_token, pad_token of tokenizer_config.json that are set, as text.
Json special_tokens(const Json& config) {
  Json out = Json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) out[key] = *it;
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      out[key] = (*it)["content"];
    }
  }
  return out;
}

jinja::Value message_value(const ChatMessage& m) {
  jinja::Object object;
  object.set("role", jinja::Value(m.role));
  object.set("content", jinja::Value(m.content));
  if (m.fields.is_object()) {
    for (const auto& [k, v] : m.fields.items()) object.set(k, jinja::Value::from_json(v));
  }
  return jinja::Value(std::move(object));
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, Json special_tokens, std::string where)
    : special_tokens_(std::move(special_tokens)), where_(std::move(where)) {
  try {
    program_ = std::make_shared<const jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    throw InputError(where_ + ": " + e.what());
  }
  try {
    ChatOptions options;
    options.add_generation_prompt = false;
    const std::string probe = render({{"user", "Hi"}, {"assistant", kProbeReply}}, options);
    const size_t at = probe.find(kProbeReply);
    if (at != std::string::npos) {
      const std::string after = probe.substr(at + std::string(kProbeReply).size());
      // A special token: "<...>" when it looks like one, else the text up to whitespace.
      const size_t close = after.find('>');
      end_of_turn_ = after.rfind('<', 0) == 0 && close != std::string::npos
                         ? after.substr(0, close + 1)
                         : after.substr(0, after.find_first_of(" \t\r\n"));
    }
  } catch (const InputError&) {
    // A template that refuses the probe conversation still renders others; EOS ends its turns.
  }
  if (end_of_turn_.empty() && special_tokens_.contains("eos_token")) {
    end_of_turn_ = special_tokens_["eos_token"].get<std::string>();
  }
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 const ChatOptions& options) const {
  jinja::Object vars;
  for (const auto& [k, v] : special_tokens_.items()) vars.set(k, jinja::Value::from_json(v));
  jinja::Array list;
  for (const ChatMessage& m : messages) list.push_back(message_value(m));
  vars.set("messages", jinja::Value(std::move(list)));
  vars.set("tools", jinja::Value::from_json(options.tools));
  vars.set("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  if (options.enable_thinking) vars.set("enable_thinking", jinja::Value(*options.enable_thinking));
  if (options.variables.is_object()) {
    for (const auto& [k, v] : options.variables.items()) vars.set(k, jinja::Value::from_json(v));
  }
  try {
    return program_->render(vars);
  } catch (const jinja::TemplateError& e) {
    throw InputError(where_ + ": " + e.what());
  }
}

ChatTemplate load_chat_template(const fs::path& checkpoint_dir) {
  const fs::path file = checkpoint_dir / "tokenizer_config.json";
  const fs::path jinja_file = checkpoint_dir / "chat_template.jinja";
  Json config = Json::object();
  if (fs::exists(file)) {
    try {
      config = Json::parse(core::read_file(file));
    } catch (const Json::parse_error& e) {
      throw InputError(file.string() + " is not valid JSON: " + e.what());
    }
    if (!config.is_object()) throw InputError(file.string() + " is not a JSON object");
  }
  std::string text = chat_template_text(config, file.string());
  fs::path where = file;
  if (text.empty() && fs::exists(jinja_file)) {
    text = core::read_file(jinja_file);
    where = jinja_file;
  }
  if (text.empty()) throw InputError("no chat template in " + file.string());
  return ChatTemplate(text, special_tokens(config), where.string());
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return chat_template.render(messages, options);
}

namespace {

template <typename AnyJson>
std::vector<ChatMessage> messages_from_json(const AnyJson& json, const std::string& where) {
  if (!json.is_array()) throw InputError(where + ": messages must be a JSON array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < json.size(); ++i) {
    const AnyJson& m = json[i];
    const std::string at = where + ": message " + std::to_string(i);
    if (!m.is_object()) throw InputError(at + " is not a JSON object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw InputError(at + " needs a string \"role\"");
    auto content = m.find("content");
    if (content == m.end() || !content->is_string()) {
      throw InputError(at + " needs a string \"content\"");
    }
    ChatMessage msg{role->template get<std::string>(), content->template get<std::string>()};
    if (!is_supported_role(msg.role)) {
      throw InputError(at + " has unsupported role '" + msg.role +
                       "' (supported: system, user, assistant, tool)");
    }
    for (const auto& [k, v] : m.items()) {
      if (k != "role" && k != "content") msg.fields[k] = v;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> parse_messages(const Json& json, const std::string& where) {
  return messages_from_json(json, where);
}

std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& json,
                                        const std::string& where) {
  return messages_from_json(json, where);
}

}  // namespace streamrl::tokenizer
