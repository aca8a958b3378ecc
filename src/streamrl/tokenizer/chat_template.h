// Chat templates of Hugging Face checkpoints, rendered natively instead of by a Jinja engine: the
// format is recognised from tokenizer_config.json "chat_template" and reproduced in C++.
// Supported: ChatML (Qwen2, Qwen2.5, Qwen3) and Llama-3 (3, 3.1, 3.2, 3.3).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace streamrl::tokenizer {

// One turn of a conversation; role is "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;

  bool operator==(const ChatMessage&) const = default;
};

enum class ChatFormat {
  // <|im_start|>{role}\n{content}<|im_end|>\n per message; prompt <|im_start|>assistant\n.
  kChatMl,
  // <|begin_of_text|>, then <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> per
  // message; prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
  kLlama3,
};

// A recognised template: its format plus the system message the template inserts when the
// conversation has none (empty: it inserts nothing).
struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatMl;
  std::string default_system;
};

// Qwen2.5's default system message, inserted by its template when no system message is given.
inline constexpr const char* kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Recognises the chat template of `checkpoint_dir`. Reads tokenizer_config.json "chat_template": a
// string, or a list of {"name", "template"} entries of which the one named "default" counts.
//   * contains "<|im_start|>"        -> ChatML; when it also contains "You are Qwen" (Qwen2.5) the
//                                       default system is kQwen25DefaultSystem
//   * contains "<|start_header_id|>" -> Llama-3
// Not replicated (a rendered prompt differs from the Jinja one in these cases): the tool-calling
// branches of every template; Qwen2's default system "You are a helpful assistant."; Qwen3's
// <think> handling (dropping reasoning of earlier assistant turns, the empty think block of
// enable_thinking=false); Llama-3.1+'s inserted system message ("Cutting Knowledge Date: ...").
// Throws InputError "no chat template in DIR/tokenizer_config.json" when the file or the field is
// missing, and "unsupported chat template in FILE (supported: ChatML, Llama-3)" otherwise; a
// malformed file is an InputError naming it.
ChatTemplate load_chat_template(const std::filesystem::path& checkpoint_dir);

// load_chat_template(checkpoint_dir).format.
ChatFormat select_chat_format(const std::filesystem::path& checkpoint_dir);

// The prompt text of `messages`, ending with the assistant header when add_generation_prompt.
// Special tokens appear as text; Tokenizer::encode maps them to their ids. When the template has a
// default system and messages do not start with a system message, it comes first. Throws
// InputError for a role other than system/user/assistant.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// The special token that ends a turn and stops generation: "<|im_end|>" (ChatML) or "<|eot_id|>"
// (Llama-3). An assistant turn rendered for training ends with it.
const char* end_of_turn_token(ChatFormat format);

// render_chat without a default system message.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

// Messages from OpenAI-style JSON: an array of {"role": string, "content": string} objects (other
// fields ignored). Throws a one-line InputError starting with `where` that names the offending
// message index for anything else, including an unsupported role or non-string content.
std::vector<ChatMessage> parse_messages(const nlohmann::json& json, const std::string& where);

}  // namespace streamrl::tokenizer
