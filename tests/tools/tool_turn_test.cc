// Tool results rendered by Qwen2.5's own chat template: the appended text is exactly what
// rendering the whole conversation puts after the model's reply.
#include <gtest/gtest.h>

#include "streamrl/tools/tool_call_parser.h"
#include "streamrl/tools/tool_turn.h"

namespace streamrl::tools {
namespace {

TEST(ToolTurn, QwenRendersResultsAsOneUserTurnThenTheAssistantHeader) {
  const auto chat = tokenizer::load_chat_template(STREAMRL_TEST_DATA_DIR "/chat_templates/qwen2_5");
  const std::string reply =
      "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2+3\"}}\n</tool_call>";
  std::vector<tokenizer::ChatMessage> history = {{"user", "What is 2+3?"}, {"assistant", reply}};
  ToolResult five, failed;
  five.text = "5";
  failed.text = "error: no key 'h'";
  const std::string turn = render_tool_turn(chat, history, {five, failed});
  EXPECT_EQ(turn,
            "\n<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n"
            "error: no key 'h'\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  // Prefix + reply + end-of-turn + turn is the render of the whole conversation.
  tokenizer::ChatOptions open;
  open.add_generation_prompt = true;
  std::vector<tokenizer::ChatMessage> first = {history[0]};
  auto whole = history;
  whole.push_back({"tool", "5"});
  whole.push_back({"tool", "error: no key 'h'"});
  EXPECT_EQ(chat.render(first, open) + reply + chat.end_of_turn() + turn, chat.render(whole, open));
  EXPECT_EQ(parse_tool_calls(reply).size(), 1u);
}

}  // namespace
}  // namespace streamrl::tools
