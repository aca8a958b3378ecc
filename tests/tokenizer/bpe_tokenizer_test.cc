#include "streamrl/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "fixtures.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::tokenizer {
namespace {

using nlohmann::json;
using testing::ByteLevelFixture;
using Ids = std::vector<int32_t>;

// Ids of the merged tokens are 256 + rank: "Hello" = 259, " world" = 264, "!!" = 265, "12" = 266.
ByteLevelFixture gpt2_fixture() {
  ByteLevelFixture f;
  f.merges = {{"l", "l"}, {"H", "e"},   {"He", "ll"}, {"Hell", "o"},  {" ", "w"},
              {"o", "r"}, {" w", "or"}, {"l", "d"},   {" wor", "ld"}, {"!", "!"},
              {"1", "2"}, {" ", "1"},   {"\n", "\n"}};
  return f;
}

// Llama-3 layout: Split(Llama-3 regex) + ByteLevel, ignore_merges, BOS template.
// Merged ids: "123" = 267, "56" = 268, "45" = 269, "456" = 270, "\n\n" = 271.
ByteLevelFixture llama3_fixture() {
  ByteLevelFixture f;
  f.merges = {{"l", "l"},   {"H", "e"}, {"He", "ll"},   {"Hell", "o"}, {" ", "w"}, {"o", "r"},
              {" w", "or"}, {"l", "d"}, {" wor", "ld"}, {"!", "!"},    {"1", "2"}, {"12", "3"},
              {"5", "6"},   {"4", "5"}, {"45", "6"},    {"\n", "\n"}};
  f.ignore_merges = true;
  f.pre_tokenizer = testing::split_then_byte_level(testing::kLlama3Pattern);
  f.added_tokens = {testing::added_token(1000, "<|begin_of_text|>"),
                    testing::added_token(1001, "<|end_of_text|>"),
                    testing::added_token(1002, "<|eot_id|>")};
  const json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
  f.post_processor = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
        {{"type", "TemplateProcessing"},
         {"single", json::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
         {"pair", json::array()},
         {"special_tokens",
          {{"<|begin_of_text|>",
            {{"id", "<|begin_of_text|>"},
             {"ids", {1000}},
             {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  return f;
}

// Qwen2 layout: NFC, Split(Qwen2 regex) + ByteLevel, no BOS.
ByteLevelFixture qwen2_fixture() {
  ByteLevelFixture f;
  f.merges = {{"1", "2"}, {"u", "s"}, {"e", "r"}, {"us", "er"}};  // "user" = 259
  f.normalizer = {{"type", "NFC"}};
  f.pre_tokenizer = testing::split_then_byte_level(testing::kQwen2Pattern);
  f.post_processor = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  f.added_tokens = {
      testing::added_token(2000, "<|endoftext|>"), testing::added_token(2001, "<|im_start|>"),
      testing::added_token(2002, "<|im_end|>"), testing::added_token(2003, "<think>", false)};
  return f;
}

BpeTokenizer make(const ByteLevelFixture& f, const TokenizerConfig& config = {}) {
  return BpeTokenizer(f.json(), "fixture.json", config);
}

const char* kMixedText = "naïve café 中文 😀! ñ\t\r\n end  \n";

TEST(Gpt2Style, MergesByRankAcrossPieces) {
  BpeTokenizer tok = make(gpt2_fixture());
  // Pieces: Hello | " world" | !! | " 123" | \n\n | " x". In " 123", "1 2" (rank 10) beats
  // " 1" (rank 11).
  EXPECT_EQ(tok.encode("Hello world!! 123\n\n x"), (Ids{259, 264, 265, 32, 266, 51, 268, 32, 120}));
  EXPECT_EQ(tok.decode({259, 264, 265, 32, 266, 51, 268, 32, 120}), "Hello world!! 123\n\n x");
}

TEST(Gpt2Style, PairFormMergesGiveTheSameIds) {
  ByteLevelFixture pairs = gpt2_fixture();
  pairs.pair_form = true;
  EXPECT_EQ(make(pairs).encode("Hello world!! 123\n\n x"),
            make(gpt2_fixture()).encode("Hello world!! 123\n\n x"));
}

TEST(Gpt2Style, NonAsciiAndEmojiRoundTrip) {
  BpeTokenizer tok = make(gpt2_fixture());
  EXPECT_EQ(tok.decode(tok.encode(kMixedText)), kMixedText);
  EXPECT_EQ(tok.encode("😀"), (Ids{0xF0, 0x9F, 0x98, 0x80}));
}

TEST(Gpt2Style, LongWordsBypassTheCacheAndStayLinear) {
  BpeTokenizer tok = make(gpt2_fixture());
  const Ids ids = tok.encode(std::string(200001, 'l'));  // "l l" (id 256) pairs them up
  ASSERT_EQ(ids.size(), 100001u);
  EXPECT_EQ(ids.front(), 256);
  EXPECT_EQ(ids[99999], 256);
  EXPECT_EQ(ids.back(), 108);
}

TEST(Gpt2Style, IllFormedUtf8BecomesReplacementCharacter) {
  BpeTokenizer tok = make(gpt2_fixture());
  EXPECT_EQ(tok.encode("a\xFF"
                       "b"),
            (Ids{97, 0xEF, 0xBF, 0xBD, 98}));
  // Decoding half of a character gives U+FFFD rather than broken UTF-8.
  EXPECT_EQ(tok.decode({97, 0xE4, 0xB8}), "a\xEF\xBF\xBD");
}

TEST(Llama3Style, DigitGroupsIgnoreMergesAndBos) {
  BpeTokenizer tok = make(llama3_fixture());
  // Pieces: Hello | " world" | !! | " " | " " | 123 | 456 | \n\n | " x". "456" is taken whole
  // (merging alone would give 4|56); " x" is not in the vocab.
  const Ids ids = {259, 264, 265, 32, 32, 267, 270, 271, 32, 120};
  EXPECT_EQ(tok.encode("Hello world!!  123456\n\n x"), ids);
  Ids with_bos = {1000};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  EXPECT_EQ(tok.encode("Hello world!!  123456\n\n x", true), with_bos);
  EXPECT_EQ(tok.decode(with_bos), "Hello world!!  123456\n\n x");
  EXPECT_EQ(tok.decode(with_bos, false), "<|begin_of_text|>Hello world!!  123456\n\n x");
  EXPECT_EQ(tok.bos_id(), 1000);
  EXPECT_EQ(tok.eos_id(), 1001);
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.vocab_size(), 1003);
}

TEST(Llama3Style, SpecialTokensAreCutBeforeTheRegex) {
  BpeTokenizer tok = make(llama3_fixture());
  // Without the cut, the regex would split "<|" "eot" "_id" "|>".
  EXPECT_EQ(tok.encode("<|begin_of_text|>Hi<|eot_id|>"), (Ids{1000, 72, 105, 1002}));
  EXPECT_EQ(tok.encode(" 😀!"), (Ids{32, 0xF0, 0x9F, 0x98, 0x80, 33}));
  EXPECT_EQ(tok.decode(tok.encode(kMixedText)), kMixedText);
}

TEST(Qwen2Style, SingleDigitsNfcAndChatTokens) {
  BpeTokenizer tok = make(qwen2_fixture());
  EXPECT_EQ(tok.encode("123456"), (Ids{49, 50, 51, 52, 53, 54}));
  EXPECT_EQ(tok.encode("Cafe\xCC\x81"), (Ids{67, 97, 102, 0xC3, 0xA9}));  // NFC: é
  const Ids chat = {2001, 259, 10, 72, 105, 2002, 2003};
  EXPECT_EQ(tok.encode("<|im_start|>user\nHi<|im_end|><think>"), chat);
  EXPECT_EQ(tok.encode("<|im_start|>user\nHi<|im_end|><think>", true), chat);
  EXPECT_EQ(tok.decode(chat), "user\nHi<think>");  // <think> is added but not special
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), 2000);
  EXPECT_EQ(tok.decode(tok.encode(kMixedText)), kMixedText);
}

TEST(Qwen2Style, TokenizerConfigNamesSpecialTokens) {
  TokenizerConfig config;
  config.bos_token = "";  // null in the file
  config.eos_token = "<|im_end|>";
  config.pad_token = "<|endoftext|>";
  BpeTokenizer tok = make(qwen2_fixture(), config);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), 2002);
  EXPECT_EQ(tok.pad_id(), 2000);
}

TEST(Qwen2Style, AddBosTokenFromConfigReplacesTemplate) {
  TokenizerConfig config;
  config.bos_token = "<|im_start|>";
  config.add_bos_token = true;
  config.add_eos_token = true;
  BpeTokenizer tok = make(qwen2_fixture(), config);
  EXPECT_EQ(tok.encode("Hi", true), (Ids{2001, 72, 105, 2000}));
}

TEST(Qwen2Style, ConfigTokenMissingFromVocabIsInputError) {
  TokenizerConfig config;
  config.eos_token = "</s>";
  EXPECT_THROW(make(qwen2_fixture(), config), InputError);
}

// SentencePiece-style BPE (Llama-2): Prepend/Replace normalizer, no pre-tokenizer, byte fallback.
std::string sentencepiece_json() {
  json vocab = {{"<unk>", 0},    {"<s>", 1}, {"</s>", 2}, {"▁", 259},  {"H", 260},   {"e", 261},
                {"l", 262},      {"o", 263}, {"▁H", 264}, {"ll", 265}, {"▁He", 266}, {"llo", 267},
                {"▁Hello", 268}, {"w", 269}, {"r", 270},  {"d", 271}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  json tokenizer = {
      {"added_tokens",
       {testing::added_token(0, "<unk>"), testing::added_token(1, "<s>"),
        testing::added_token(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {"l l", "▁ H", "▁H e", "ll o", "▁He llo"}}}}};
  return tokenizer.dump();
}

TEST(SentencePieceStyle, ByteFallbackAndPrependedSpace) {
  BpeTokenizer tok(sentencepiece_json(), "sp.json");
  const Ids ids = {268, 259, 269, 263, 270, 262, 271, 259, 3 + 0xE4, 3 + 0xB8, 3 + 0xAD};
  EXPECT_EQ(tok.encode("Hello world 中"), ids);
  Ids with_bos = {1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  EXPECT_EQ(tok.encode("Hello world 中", true), with_bos);
  EXPECT_EQ(tok.decode(with_bos), "Hello world 中");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST(BpeTokenizer, TokenLookupsCoverAddedTokens) {
  BpeTokenizer tok = make(qwen2_fixture());
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 2002);
  EXPECT_EQ(tok.token_to_id("user"), 259);
  EXPECT_EQ(tok.token_to_id(" "), std::nullopt);  // tokens are in the byte-level alphabet: "Ġ"
  EXPECT_EQ(tok.token_to_id(testing::mapped(" ")), 32);
  EXPECT_EQ(tok.id_to_token(2001), "<|im_start|>");
  EXPECT_EQ(tok.id_to_token(1500), std::nullopt);
  EXPECT_EQ(tok.decode({72, 1500, 105}), "Hi");  // ids without a token are skipped
}

TEST(BpeTokenizer, ToJsonIsTheSourceText) {
  const std::string text = qwen2_fixture().json();
  EXPECT_EQ(BpeTokenizer(text, "x.json").to_json(), text);
}

std::string tokenizer_error(const std::string& json_text) {
  try {
    BpeTokenizer tok(json_text, "m/tokenizer.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(BpeTokenizer, ErrorsNameTheFile) {
  EXPECT_EQ(tokenizer_error("{\"model\": ").rfind("malformed JSON in m/tokenizer.json: ", 0), 0u);
  EXPECT_EQ(tokenizer_error("{}"),
            "m/tokenizer.json is not a tokenizer.json (no \"model\" object)");
  EXPECT_EQ(
      tokenizer_error(R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]}})"),
      "unsupported tokenizer model type 'Unigram' in m/tokenizer.json (supported: BPE)");
  EXPECT_EQ(tokenizer_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
            "merges entry 0 (\"a b\") in m/tokenizer.json refers to token 'b' which is not in "
            "the vocabulary");
  EXPECT_EQ(tokenizer_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})")
                .rfind("invalid tokenizer.json m/tokenizer.json: ", 0),
            0u);
  ByteLevelFixture f = gpt2_fixture();
  f.normalizer = {{"type", "BertNormalizer"}};
  EXPECT_EQ(tokenizer_error(f.json()).rfind("unsupported normalizer type 'BertNormalizer'", 0), 0u);
}

}  // namespace
}  // namespace streamrl::tokenizer
