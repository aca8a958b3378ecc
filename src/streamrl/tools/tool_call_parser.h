// Tool calls in the Hermes/Qwen format the chat templates of Qwen2.5/Qwen3 teach:
//   <tool_call>
//   {"name": "calc", "arguments": {"expression": "2+3"}}
//   </tool_call>
// Parsed from a finished reply, or from the decode stream chunk by chunk so that a call can start
// the moment its closing tag is generated (Teola's decoding pipelining).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "streamrl/tools/tool.h"

namespace streamrl::tools {

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

// One call from the text between the tags: a JSON object with a string "name" and "arguments"
// (an object, or a string holding one, as some models write). Anything else gives a call whose
// `error` says what was wrong, for the model to read.
ToolCall parse_tool_call(std::string_view body);

// Every complete <tool_call>...</tool_call> of `text`, in order. An opening tag left unclosed is
// not a call (the reply was cut off).
std::vector<ToolCall> parse_tool_calls(std::string_view text);

// Incremental: feed() the decoded text as it grows; each call is returned once, by the feed() in
// which its closing tag completes.
class ToolCallStream {
 public:
  std::vector<ToolCall> feed(std::string_view chunk);
  // True while an opening tag has been seen and its closing tag not yet.
  bool inside_call() const;

 private:
  std::string text_;
  size_t scanned_ = 0;  // calls before this offset were returned
};

}  // namespace streamrl::tools
