#include "streamrl/tokenizer/added_vocabulary.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace streamrl::tokenizer {
namespace {

using Splits = std::vector<std::pair<std::string, int32_t>>;  // text, or "" and an id

Splits split_added(const AddedVocabulary& vocab, const std::string& text,
                   const Normalizer* normalizer = nullptr) {
  Splits out;
  vocab.split(
      text, normalizer, [&](std::string_view piece, bool) { out.emplace_back(piece, -1); },
      [&](int32_t id) { out.emplace_back("", id); });
  return out;
}

AddedToken token(int32_t id, std::string content, bool special = true) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  return t;
}

TEST(AddedVocabulary, LeftmostLongestMatch) {
  AddedVocabulary vocab({token(1, "<|a|>"), token(2, "<|a|><|b|>"), token(3, "|>")}, nullptr);
  EXPECT_EQ(split_added(vocab, "x<|a|><|b|>y<|a|>"),
            (Splits{{"x", -1}, {"", 2}, {"y", -1}, {"", 1}}));
  EXPECT_EQ(split_added(vocab, "no tokens"), (Splits{{"no tokens", -1}}));
}

// The cases of Hugging Face's added_vocabulary.rs tests, without their lowercasing normalizer.
TEST(AddedVocabulary, LstripRstripSingleWord) {
  AddedToken my = token(0, "my", false);
  my.lstrip = my.rstrip = true;
  AddedToken ony = token(2, "ony", false);
  ony.single_word = true;
  AddedVocabulary vocab({my, token(1, "name", false), ony, token(3, "[CLS]"), token(4, "[SEP]")},
                        nullptr);
  EXPECT_EQ(split_added(vocab, "[CLS] my name is anthony [SEP]"),
            (Splits{{"", 3}, {"", 0}, {"", 1}, {" is anthony ", -1}, {"", 4}}));
}

TEST(AddedVocabulary, SingleWordNeedsNonWordNeighbours) {
  AddedToken mask = token(0, "<mask>", false);
  mask.single_word = true;
  AddedVocabulary vocab({mask}, nullptr);
  EXPECT_EQ(split_added(vocab, "<mask> my name <mask> a<mask> <mask>ony <mask>"),
            (Splits{{"", 0}, {" my name ", -1}, {"", 0}, {" a<mask> <mask>ony ", -1}, {"", 0}}));
}

TEST(AddedVocabulary, NormalizedTokensMatchNormalizedText) {
  auto lower = parse_normalizer({{"type", "Lowercase"}}, "test.json");
  const AddedToken raw = token(7, "Hello", false);  // normalized=false: matched on the raw input
  AddedToken normalized = raw;
  normalized.normalized = true;
  EXPECT_EQ(split_added(AddedVocabulary({normalized}, lower.get()), "say HELLO", lower.get()),
            (Splits{{"say ", -1}, {"", 7}}));
  EXPECT_EQ(split_added(AddedVocabulary({raw}, lower.get()), "say HELLO", lower.get()),
            (Splits{{"say hello", -1}}));
}

TEST(AddedVocabulary, AtStartOnlyForTheFirstStretch) {
  AddedVocabulary vocab({token(1, "<s>")}, nullptr);
  std::vector<bool> starts;
  vocab.split(
      "a<s>b", nullptr, [&](std::string_view, bool at_start) { starts.push_back(at_start); },
      [](int32_t) {});
  EXPECT_EQ(starts, (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace streamrl::tokenizer
