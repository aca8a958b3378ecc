// The Hermes <tool_call> format, whole and streamed token by token.
#include <gtest/gtest.h>

#include "streamrl/tools/tool_call_parser.h"

namespace streamrl::tools {
namespace {

TEST(ToolCallParser, ParsesEveryCompleteCall) {
  const std::string text =
      "Let me add.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+3\"}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"lookup\", \"arguments\": \"{\\\"key\\\": \\\"g\\\"}\"}"
      "</tool_call><tool_call>{\"name\": \"calc\"";
  auto calls = parse_tool_calls(text);
  ASSERT_EQ(calls.size(), 2u);  // the third is cut off
  EXPECT_EQ(calls[0].name, "calc");
  EXPECT_EQ(calls[0].arguments, nlohmann::json({{"expression", "2+3"}}));
  EXPECT_TRUE(calls[0].error.empty());
  EXPECT_EQ(calls[1].name, "lookup");  // arguments given as a JSON string
  EXPECT_EQ(calls[1].arguments, nlohmann::json({{"key", "g"}}));
  EXPECT_TRUE(parse_tool_calls("no calls here").empty());
}

TEST(ToolCallParser, MalformedCallsCarryAnError) {
  EXPECT_NE(parse_tool_call("{\"name\": ").error.find("not JSON"), std::string::npos);
  EXPECT_NE(parse_tool_call("[1, 2]").error.find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_tool_call("{\"arguments\": {}}").error.find("no string \"name\""),
            std::string::npos);
  ToolCall c = parse_tool_call("{\"name\": \"calc\", \"arguments\": 5}");
  EXPECT_EQ(c.name, "calc");
  EXPECT_NE(c.error.find("\"arguments\" is not an object"), std::string::npos);
  EXPECT_TRUE(parse_tool_call("{\"name\": \"now\"}").error.empty());  // no arguments: {}
}

// Decoding pipelining: a call is ready in the very chunk that completes its closing tag.
TEST(ToolCallParser, StreamReturnsEachCallWhenItsTagCloses) {
  const std::string text =
      "a<tool_call>{\"name\": \"calc\", \"arguments\": {\"expression\": \"1+1\"}}</tool_call>b"
      "<tool_call>{\"name\": \"lookup\", \"arguments\": {\"key\": \"k\"}}</tool_call>";
  const size_t first_close = text.find("</tool_call>") + std::string("</tool_call>").size();
  ToolCallStream stream;
  std::vector<std::pair<size_t, std::string>> seen;  // (characters fed, call name)
  for (size_t i = 0; i < text.size(); ++i) {
    for (const auto& c : stream.feed(text.substr(i, 1))) seen.emplace_back(i + 1, c.name);
    if (i + 1 == 5) EXPECT_FALSE(stream.inside_call());
    if (i + 1 == 20) EXPECT_TRUE(stream.inside_call());
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(first_close, std::string("calc")));
  EXPECT_EQ(seen[1], std::make_pair(text.size(), std::string("lookup")));
  EXPECT_FALSE(stream.inside_call());
}

}  // namespace
}  // namespace streamrl::tools
