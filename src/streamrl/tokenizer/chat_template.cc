// Recognition of HF chat templates and their native rendering (see chat_template.h).
#include "streamrl/tokenizer/chat_template.h"

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::tokenizer {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

bool is_supported_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant";
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

}  // namespace

ChatTemplate load_chat_template(const fs::path& checkpoint_dir) {
  const fs::path file = checkpoint_dir / "tokenizer_config.json";
  const std::string no_template = "no chat template in " + file.string();
  if (!fs::exists(file)) throw InputError(no_template);
  Json config;
  try {
    config = Json::parse(core::read_file(file));
  } catch (const Json::parse_error& e) {
    throw InputError(file.string() + " is not valid JSON: " + e.what());
  }
  if (!config.is_object()) throw InputError(file.string() + " is not a JSON object");
  const std::string text = chat_template_text(config, file.string());
  if (text.empty()) throw InputError(no_template);
  if (text.find("<|im_start|>") != std::string::npos) {
    ChatTemplate out{ChatFormat::kChatMl, ""};
    if (text.find("You are Qwen") != std::string::npos) out.default_system = kQwen25DefaultSystem;
    return out;
  }
  if (text.find("<|start_header_id|>") != std::string::npos) return {ChatFormat::kLlama3, ""};
  throw InputError("unsupported chat template in " + file.string() +
                   " (supported: ChatML, Llama-3)");
}

ChatFormat select_chat_format(const fs::path& checkpoint_dir) {
  return load_chat_template(checkpoint_dir).format;
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  std::vector<ChatMessage> turns;
  if (!chat_template.default_system.empty() &&
      (messages.empty() || messages.front().role != "system")) {
    turns.push_back({"system", chat_template.default_system});
  }
  turns.insert(turns.end(), messages.begin(), messages.end());
  std::string out;
  if (chat_template.format == ChatFormat::kLlama3) out += "<|begin_of_text|>";
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = turns[i];
    if (!is_supported_role(m.role)) {
      throw InputError("chat message has unsupported role '" + m.role +
                       "' (supported: system, user, assistant)");
    }
    if (chat_template.format == ChatFormat::kChatMl) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    }
  }
  if (add_generation_prompt) {
    out += chat_template.format == ChatFormat::kChatMl
               ? "<|im_start|>assistant\n"
               : "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return out;
}

const char* end_of_turn_token(ChatFormat format) {
  return format == ChatFormat::kChatMl ? "<|im_end|>" : "<|eot_id|>";
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  return render_chat(ChatTemplate{format, ""}, messages, add_generation_prompt);
}

std::vector<ChatMessage> parse_messages(const Json& json, const std::string& where) {
  if (!json.is_array()) throw InputError(where + ": messages must be a JSON array");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < json.size(); ++i) {
    const Json& m = json[i];
    const std::string at = where + ": message " + std::to_string(i);
    if (!m.is_object()) throw InputError(at + " is not a JSON object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw InputError(at + " needs a string \"role\"");
    auto content = m.find("content");
    if (content == m.end() || !content->is_string()) {
      throw InputError(at + " needs a string \"content\"");
    }
    ChatMessage msg{role->get<std::string>(), content->get<std::string>()};
    if (!is_supported_role(msg.role)) {
      throw InputError(at + " has unsupported role '" + msg.role +
                       "' (supported: system, user, assistant)");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace streamrl::tokenizer
