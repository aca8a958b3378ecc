#include "streamrl/rl/sequences.h"

#include <gtest/gtest.h>

namespace streamrl::rl {
namespace {

TEST(Sequences, PromptGetsBosAndBatchMasksCompletion) {
  auto tok = tokenizer::make_tokenizer("char");
  auto p = encode_prompt(*tok, "1+2=");
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0], tok->bos_id());
  SequenceBatch b = make_sequence_batch({{1, 5, 6}, {1}}, {{7, 2}, {8, 9, 2}});
  EXPECT_EQ(b.tokens.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(b.num_completion_tokens, 5);
  EXPECT_TRUE(torch::equal(b.tokens[0], torch::tensor({1, 5, 6, 7, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.tokens[1], torch::tensor({1, 8, 9, 2, 0}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.completion[0], torch::tensor({0, 0, 0, 1, 1}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(b.completion[1], torch::tensor({0, 1, 1, 1, 0}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(b.valid[1], torch::tensor({1, 1, 1, 1, 0}).to(torch::kBool)));
}

}  // namespace
}  // namespace streamrl::rl
