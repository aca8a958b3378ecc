// The chat template of a Hugging Face checkpoint, executed: the Jinja text of tokenizer_config.json
// "chat_template" (or chat_template.jinja) runs in a Jinja interpreter (jinja/template.h) with the
// variables transformers' apply_chat_template passes, so any model family renders as it does in
// transformers: Llama-3's trimmed contents, Qwen3's <think> handling, Gemma's role checks,
// Mistral, DeepSeek, Phi, tool schemas.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace streamrl::tokenizer {

namespace jinja {
class Template;
}

// One turn of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // The message's other fields as given (tool_calls, reasoning_content, name, tool_call_id, ...):
  // a JSON object, empty when there are none. The template sees them as message.FIELD. Ordered:
  // tojson prints keys in the order given, as transformers does.
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();

  bool operator==(const ChatMessage&) const = default;
};

// What apply_chat_template's keyword arguments set, besides the messages.
struct ChatOptions {
  // End with the header of an assistant turn, so the model writes the reply.
  bool add_generation_prompt = true;
  // The tools variable: a JSON list of tool schemas, or null (templates test "tools is not none").
  nlohmann::ordered_json tools = nullptr;
  // enable_thinking (Qwen3 and others); unset leaves the variable undefined.
  std::optional<bool> enable_thinking;
  // Any other template variables (e.g. Llama-3.1's date_string), a JSON object.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses the Jinja `source`. `special_tokens` maps bos_token, eos_token, ... to their text (a
  // JSON object of strings) and are template variables. `where` names the source in errors. Throws
  // InputError "WHERE: chat template line N: ..." on a syntax error.
  ChatTemplate(const std::string& source, nlohmann::json special_tokens, std::string where);

  // The rendered conversation; special tokens appear as text. Throws InputError "WHERE: chat
  // template line N: MESSAGE" when the template rejects the conversation (raise_exception, e.g.
  // roles that do not alternate) or fails.
  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

  // The marker the template writes right after an assistant turn's content, up to the first
  // whitespace: "<|im_end|>" (ChatML), "<|eot_id|>" (Llama-3), "<end_of_turn>" (Gemma), "</s>"
  // (Mistral). Found by rendering a probe conversation; the eos_token when the probe shows none.
  // It ends a generated reply and an SFT target. Empty when neither exists.
  const std::string& end_of_turn() const { return end_of_turn_; }

 private:
  std::shared_ptr<const jinja::Template> program_;
  nlohmann::json special_tokens_;
  std::string where_;
  std::string end_of_turn_;
};

// The chat template of the checkpoint in `checkpoint_dir`: tokenizer_config.json "chat_template"
// (a string, or a list of {"name", "template"} entries of which the one named "default" counts),
// else the file chat_template.jinja; bos_token, eos_token, unk_token and pad_token of
// tokenizer_config.json (strings or {"content": ...} objects) are its special tokens. Throws
// InputError "no chat template in DIR/tokenizer_config.json" when there is none; a malformed file
// or template is an InputError naming it.
ChatTemplate load_chat_template(const std::filesystem::path& checkpoint_dir);

// chat_template.render(messages, {add_generation_prompt}).
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// Messages from OpenAI-style JSON: an array of {"role": string, "content": string, ...} objects;
// the other fields are kept in ChatMessage::fields. Throws a one-line InputError starting with
// `where` that names the offending message index for anything else, including a role other than
// system/user/assistant/tool or non-string content. Parse the request with ordered_json to keep
// the key order of the other fields (nlohmann::json sorts keys).
std::vector<ChatMessage> parse_messages(const nlohmann::json& json, const std::string& where);
std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& json,
                                        const std::string& where);

}  // namespace streamrl::tokenizer
