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

// A multi-turn sample's appended tokens (mask 0) are context: valid, not trained, not counted.
TEST(Sequences, TrainedMaskLeavesAppendedTokensOutOfTheCompletion) {
  const std::vector<uint8_t> turns = {1, 0, 0, 1}, none;
  SequenceBatch b = make_sequence_batch({{1, 5}, {1}}, {{7, 8, 9, 2}, {3, 2}}, {&turns, &none});
  EXPECT_EQ(b.num_completion_tokens, 2 + 2);
  EXPECT_TRUE(torch::equal(b.completion[0], torch::tensor({0, 0, 1, 0, 0, 1}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(b.completion[1], torch::tensor({0, 1, 1, 0, 0, 0}).to(torch::kBool)));
  EXPECT_TRUE(torch::equal(b.valid[0], torch::ones({6}, torch::kBool)));
}

TEST(Sequences, PackByTokenBudgetGroupsSimilarLengths) {
  std::vector<int64_t> lengths = {10, 100, 12, 50, 11, 300};
  auto packs = pack_by_token_budget(lengths, 120);
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& p : packs) {
    int64_t longest = 0;
    for (size_t i : p) longest = std::max(longest, lengths[i]), ++seen[i];
    if (p.size() > 1) EXPECT_LE(static_cast<int64_t>(p.size()) * longest, 120);
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_EQ(packs.front(), std::vector<size_t>{5});  // longer than the budget: alone
  EXPECT_EQ(packs.size(), 4u);                       // [300] [100] [50, 12] [11, 10]
  EXPECT_EQ(packs.back(), (std::vector<size_t>{4, 0}));
}

}  // namespace
}  // namespace streamrl::rl
