// The text a multi-turn rollout appends after the model's tool-calling reply: the tool results as
// the checkpoint's chat template renders "tool" messages, then the header of the next assistant
// turn. The rollout keeps its KV cache and prefills only this text (never the conversation again),
// so the text must be exactly what rendering the whole conversation would have put there.
#pragma once

#include <string>
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

}  // namespace streamrl::tools
