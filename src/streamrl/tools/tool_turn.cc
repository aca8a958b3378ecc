#include "streamrl/tools/tool_turn.h"

#include "streamrl/core/errors.h"
#include "streamrl/tools/tool_call_parser.h"

namespace streamrl::tools {

std::string render_tool_turn(const tokenizer::ChatTemplate& chat_template,
                             const std::vector<tokenizer::ChatMessage>& history,
                             const std::vector<ToolResult>& results) {
  if (history.empty() || history.back().role != "assistant") {
    throw InputError("render_tool_turn: the conversation must end with the assistant's reply");
  }
  std::vector<tokenizer::ChatMessage> after = history;
  for (const auto& r : results) after.push_back({"tool", r.text});
  tokenizer::ChatOptions until_reply, with_results;
  until_reply.add_generation_prompt = false;
  with_results.add_generation_prompt = true;
  const std::string before = chat_template.render(history, until_reply);
  const std::string full = chat_template.render(after, with_results);
  const std::string& reply = history.back().content;
  const std::string& eot = chat_template.end_of_turn();
  // The reply as the template wrote it, then its end-of-turn marker.
  const size_t at = before.rfind(reply + eot);
  if (at == std::string::npos || full.compare(0, before.size(), before) != 0) {
    throw InputError(
        "render_tool_turn: the chat template does not render tool results as a continuation of "
        "the conversation");
  }
  return full.substr(at + reply.size() + eot.size());
}

std::string render_plain_tool_turn(const std::vector<ToolResult>& results) {
  std::string out;
  for (const auto& r : results) {
    out.append(kToolResponseOpen).append(r.text).append(kToolResponseClose);
  }
  return out;
}

std::string format_tool_call(const std::string& name, const nlohmann::json& arguments) {
  // name before arguments, as the Hermes format shows them (nlohmann's object sorts its keys).
  std::string out(kToolCallOpen);
  out += "{\"name\":" + nlohmann::json(name).dump() + ",\"arguments\":" + arguments.dump() + "}";
  out.append(kToolCallClose);
  return out;
}

}  // namespace streamrl::tools
