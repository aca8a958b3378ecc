// The text a multi-turn rollout appends after the model's tool-calling reply: the tool results as
// the checkpoint's chat template renders "tool" messages, then the header of the next assistant
// turn. The rollout keeps its KV cache and prefills only this text (never the conversation again),
// so the text must be exactly what rendering the whole conversation would have put there.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "streamrl/tokenizer/chat_template.h"
#include "streamrl/tools/tool.h"

namespace streamrl::tools {

// `history` ends with the assistant message whose content is the reply the model generated, up
// to (not including) the template's end-of-turn marker, which the model generated too. Returns
// what the template writes after that marker when the `results` follow as tool messages and a
// generation prompt ends the text. InputError when the template does not render the longer
// conversation as an extension of the shorter one.
std::string render_tool_turn(const tokenizer::ChatTemplate& chat_template,
                             const std::vector<tokenizer::ChatMessage>& history,
                             const std::vector<ToolResult>& results);

// Plain-text prompts (no chat template, e.g. the built-in tasks on the char tokenizer): after the
// model's reply and its EOS, each result as <tool_response>TEXT</tool_response>, nothing else.
inline constexpr std::string_view kToolResponseOpen = "<tool_response>";
inline constexpr std::string_view kToolResponseClose = "</tool_response>";
std::string render_plain_tool_turn(const std::vector<ToolResult>& results);

// A call as a reply writes it, compact: <tool_call>{"name":NAME,"arguments":ARGS}</tool_call>.
std::string format_tool_call(const std::string& name, const nlohmann::json& arguments);

}  // namespace streamrl::tools
