#include "streamrl/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fixtures.h"
#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

Pieces pre_split(const json& spec, const std::string& text) {
  auto pre = parse_pre_tokenizer(spec, "test.json");
  Pieces pieces;
  pre->split(text, true, [&](std::string_view piece, bool) { pieces.emplace_back(piece); });
  return pieces;
}

json regex_split(const char* pattern, const char* behavior = "Isolated", bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", pattern}}},
          {"behavior", behavior},
          {"invert", invert}};
}

const json kGpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};

// Expected splits agree with Python's `regex` module on the same patterns.
TEST(Llama3Split, WordsPunctuationSpacesDigitGroupsNewlines) {
  EXPECT_EQ(pre_split(regex_split(testing::kLlama3Pattern), "Hello world!!  123456\n\n x"),
            (Pieces{"Hello", " world", "!!", " ", " ", "123", "456", "\n\n", " x"}));
  EXPECT_EQ(pre_split(regex_split(testing::kLlama3Pattern), "1234567"),
            (Pieces{"123", "456", "7"}));
}

TEST(Llama3Split, ContractionsAreCaseInsensitive) {
  EXPECT_EQ(pre_split(regex_split(testing::kLlama3Pattern), "I'M here, they'll don't"),
            (Pieces{"I", "'M", " here", ",", " they", "'ll", " don", "'t"}));
}

TEST(Llama3Split, WhitespaceRuns) {
  const json spec = regex_split(testing::kLlama3Pattern);
  EXPECT_EQ(pre_split(spec, "   hello"), (Pieces{"  ", " hello"}));
  EXPECT_EQ(pre_split(spec, "hello   "), (Pieces{"hello", "   "}));
  EXPECT_EQ(pre_split(spec, "x\t\ty"), (Pieces{"x", "\t", "\ty"}));
  EXPECT_EQ(pre_split(spec, "a\r\nb"), (Pieces{"a", "\r\n", "b"}));
  EXPECT_EQ(pre_split(spec, "end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
}

TEST(Llama3Split, UnicodeLettersAndSymbols) {
  EXPECT_EQ(pre_split(regex_split(testing::kLlama3Pattern), "naïve café 中文 😀!"),
            (Pieces{"naïve", " café", " 中文", " 😀!"}));
}

TEST(Qwen2Split, SingleDigits) {
  EXPECT_EQ(
      pre_split(regex_split(testing::kQwen2Pattern), "Hello world!!  123456\n\n x"),
      (Pieces{"Hello", " world", "!!", " ", " ", "1", "2", "3", "4", "5", "6", "\n\n", " x"}));
}

TEST(ByteLevelPreTokenizer, Gpt2PatternAndMapping) {
  EXPECT_EQ(pre_split(kGpt2, "Hello world!!  123456\n\n x"),
            (Pieces{"Hello", "Ġworld", "!!", "Ġ", "Ġ123456", "ĊĊ", "Ġx"}));
  EXPECT_EQ(pre_split(kGpt2, "I'M a\r\nb"), (Pieces{"I", "'", "M", "Ġa", "č", "Ċ", "b"}));
  EXPECT_EQ(pre_split(kGpt2, "Hello there       dear"),
            (Pieces{"Hello", "Ġthere", "ĠĠĠĠĠĠ", "Ġdear"}));
}

TEST(ByteLevelPreTokenizer, NonAsciiBytesMapToAlphabet) {
  EXPECT_EQ(pre_split(kGpt2, "i⭢j"), (Pieces{"i", "âŃ¢", "j"}));
}

TEST(ByteLevelPreTokenizer, AddPrefixSpaceOnlyWhenMissing) {
  json spec = kGpt2;
  spec["add_prefix_space"] = true;
  EXPECT_EQ(pre_split(spec, "Hello my"), (Pieces{"ĠHello", "Ġmy"}));
  EXPECT_EQ(pre_split(spec, " Hello my"), (Pieces{"ĠHello", "Ġmy"}));
}

TEST(ByteLevelPreTokenizer, WithoutRegexMapsWholeText) {
  EXPECT_EQ(pre_split({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}},
                      "Hello my friend"),
            (Pieces{"HelloĠmyĠfriend"}));
}

// The cases of Hugging Face's split.rs tests: the whitespace regex, inverted.
TEST(SplitPreTokenizer, Behaviors) {
  const char* text = "How are you doing?";
  const char* pattern = R"(\w+|[^\w\s]+)";
  EXPECT_EQ(pre_split(regex_split(pattern, "Removed", true), text),
            (Pieces{"How", "are", "you", "doing", "?"}));
  EXPECT_EQ(pre_split(regex_split(pattern, "Isolated", true), text),
            (Pieces{"How", " ", "are", " ", "you", " ", "doing", "?"}));
  EXPECT_EQ(pre_split(regex_split(pattern, "MergedWithPrevious", true), text),
            (Pieces{"How ", "are ", "you ", "doing", "?"}));
  EXPECT_EQ(pre_split(regex_split(pattern, "MergedWithNext", true), text),
            (Pieces{"How", " are", " you", " doing", "?"}));
  EXPECT_EQ(pre_split(regex_split(pattern, "Contiguous", true), text),
            (Pieces{"How", " ", "are", " ", "you", " ", "doing?"}));
}

TEST(SplitPreTokenizer, StringPatternIsLiteral) {
  const json spec = {{"type", "Split"},
                     {"pattern", {{"String", "."}}},
                     {"behavior", "Removed"},
                     {"invert", false}};
  EXPECT_EQ(pre_split(spec, "a.b..c"), (Pieces{"a", "b", "c"}));
}

TEST(MetaspacePreTokenizer, ReplacesSpacesAndSplitsBeforeThem) {
  const json spec = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(pre_split(spec, "Hey   friend!"), (Pieces{"▁Hey", "▁", "▁", "▁friend!"}));
  const json never = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}};
  EXPECT_EQ(pre_split(never, "Hey friend"), (Pieces{"Hey", "▁friend"}));
}

TEST(MetaspacePreTokenizer, PrependFirstOnlyAtInputStart) {
  auto pre = parse_pre_tokenizer(
      {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}}, "test.json");
  Pieces pieces;
  auto sink = [&](std::string_view piece, bool) { pieces.emplace_back(piece); };
  pre->split("Hey", true, sink);
  pre->split("Hey", false, sink);
  EXPECT_EQ(pieces, (Pieces{"▁Hey", "Hey"}));
}

TEST(DigitsPreTokenizer, IndividualOrContiguous) {
  EXPECT_EQ(pre_split({{"type", "Digits"}, {"individual_digits", true}}, "Call 123 please"),
            (Pieces{"Call ", "1", "2", "3", " please"}));
  EXPECT_EQ(pre_split({{"type", "Digits"}, {"individual_digits", false}}, "Call 123 please"),
            (Pieces{"Call ", "123", " please"}));
}

TEST(SequencePreTokenizer, AppliesStepsToEachPiece) {
  const json spec = testing::split_then_byte_level(testing::kLlama3Pattern);
  EXPECT_EQ(pre_split(spec, "Hi  there\n"), (Pieces{"Hi", "Ġ", "Ġthere", "Ċ"}));
}

TEST(PreTokenizerSpec, UnsupportedTypeNamesFile) {
  try {
    parse_pre_tokenizer({{"type", "BertPreTokenizer"}}, "model/tokenizer.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unsupported pre_tokenizer type 'BertPreTokenizer' in model/tokenizer.json "
              "(supported: ByteLevel, Split, Sequence, Metaspace, Digits, Whitespace, "
              "WhitespaceSplit, Punctuation)");
  }
}

TEST(PreTokenizerSpec, BadRegexIsInputError) {
  EXPECT_THROW(pre_split(regex_split("(unclosed"), "x"), InputError);
}

}  // namespace
}  // namespace streamrl::tokenizer
