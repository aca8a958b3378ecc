#include "streamrl/tools/tool_call_parser.h"

namespace streamrl::tools {
namespace {

ToolCall failed(std::string why) {
  ToolCall c;
  c.error = "malformed tool call: " + std::move(why) +
            " (expected {\"name\": ..., \"arguments\": {...}})";
  return c;
}

// Calls whose closing tag ends at or before text.size(), starting the search at `from`; `end` is
// set past the last one.
std::vector<ToolCall> complete_calls(std::string_view text, size_t from, size_t* end) {
  std::vector<ToolCall> out;
  *end = from;
  while (true) {
    const size_t open = text.find(kToolCallOpen, *end);
    if (open == std::string_view::npos) return out;
    const size_t body = open + kToolCallOpen.size();
    const size_t close = text.find(kToolCallClose, body);
    if (close == std::string_view::npos) return out;
    out.push_back(parse_tool_call(text.substr(body, close - body)));
    *end = close + kToolCallClose.size();
  }
}

}  // namespace

ToolCall parse_tool_call(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return failed("not JSON");
  if (!j.is_object()) return failed("not a JSON object");
  if (!j.contains("name") || !j["name"].is_string()) return failed("no string \"name\"");
  ToolCall c;
  c.name = j["name"].get<std::string>();
  if (j.contains("arguments")) {
    nlohmann::json args = j["arguments"];
    if (args.is_string()) {
      args = nlohmann::json::parse(args.get<std::string>(), nullptr, false);
    }
    if (!args.is_object()) {
      ToolCall bad = failed("\"arguments\" is not an object");
      bad.name = c.name;
      return bad;
    }
    c.arguments = std::move(args);
  }
  return c;
}

std::vector<ToolCall> parse_tool_calls(std::string_view text) {
  size_t end = 0;
  return complete_calls(text, 0, &end);
}

std::vector<ToolCall> ToolCallStream::feed(std::string_view chunk) {
  text_.append(chunk);
  size_t end = scanned_;
  std::vector<ToolCall> calls = complete_calls(text_, scanned_, &end);
  scanned_ = end;
  return calls;
}

bool ToolCallStream::inside_call() const {
  return text_.find(kToolCallOpen, scanned_) != std::string::npos;
}

}  // namespace streamrl::tools
