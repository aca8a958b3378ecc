#include "streamrl/tokenizer/bpe_model.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

Ids encode(const BpeModel& model, const std::string& word) {
  Ids ids;
  model.encode_word(word, ids);
  return ids;
}

json model_spec(json vocab, json merges) {
  return {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

const json kAbcVocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};

TEST(BpeModel, LowestRankFirstThenLeftmost) {
  BpeModel model(model_spec(kAbcVocab, {"b c", "a b", "a bc"}), "test.json");
  EXPECT_EQ(encode(model, "abc"), (Ids{5}));
  EXPECT_EQ(encode(model, "abcab"), (Ids{5, 3}));
  EXPECT_EQ(encode(model, "cab"), (Ids{2, 3}));
  BpeModel aa(model_spec({{"a", 0}, {"aa", 1}}, {"a a"}), "test.json");
  EXPECT_EQ(encode(aa, "aaa"), (Ids{1, 0}));
}

TEST(BpeModel, StringAndPairMergeFormsAgree) {
  BpeModel strings(model_spec(kAbcVocab, {"b c", "a b", "a bc"}), "test.json");
  // Explicit arrays: a braced list of string pairs would become a JSON object.
  BpeModel pairs(
      model_spec(kAbcVocab, json::array({json::array({"b", "c"}), json::array({"a", "b"}),
                                         json::array({"a", "bc"})})),
      "test.json");
  for (const char* word : {"abc", "abcab", "cab", "bcbca", "cccab"}) {
    EXPECT_EQ(encode(strings, word), encode(pairs, word)) << word;
  }
}

TEST(BpeModel, CachedAnswersStayIdenticalAcrossThreads) {
  BpeModel model(model_spec(kAbcVocab, {"b c", "a b", "a bc"}), "test.json");
  const Ids expected = encode(model, "abcabcab");
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) mismatches[t] += encode(model, "abcabcab") != expected;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST(BpeModel, ByteFallbackForCharactersOutsideTheVocab) {
  json vocab = {{"<unk>", 0}, {"a", 257}, {"b", 258}, {"ab", 259}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 1 + b;
  }
  json spec = model_spec(vocab, {"a b"});
  spec["byte_fallback"] = true;
  spec["unk_token"] = "<unk>";
  BpeModel model(spec, "test.json");
  EXPECT_EQ(encode(model, "abé"), (Ids{259, 1 + 0xC3, 1 + 0xA9}));
}

TEST(BpeModel, UnknownTokenFusedOrNotOrDropped) {
  json spec = model_spec({{"<unk>", 0}, {"a", 1}}, json::array());
  spec["unk_token"] = "<unk>";
  EXPECT_EQ(encode(BpeModel(spec, "t"), "aéèa"), (Ids{1, 0, 0, 1}));
  spec["fuse_unk"] = true;
  EXPECT_EQ(encode(BpeModel(spec, "t"), "aéèa"), (Ids{1, 0, 1}));
  spec["unk_token"] = nullptr;
  EXPECT_EQ(encode(BpeModel(spec, "t"), "aéèa"), (Ids{1, 1}));
}

TEST(BpeModel, IgnoreMergesTakesWholeWordFromVocab) {
  // "5 6" outranks "4 5", so merging gives 4|56; the vocab also holds "456" itself.
  json spec = model_spec({{"4", 0}, {"5", 1}, {"6", 2}, {"45", 3}, {"56", 4}, {"456", 5}},
                         {"5 6", "4 5", "45 6"});
  EXPECT_EQ(encode(BpeModel(spec, "t"), "456"), (Ids{0, 4}));
  spec["ignore_merges"] = true;
  EXPECT_EQ(encode(BpeModel(spec, "t"), "456"), (Ids{5}));
  EXPECT_EQ(encode(BpeModel(spec, "t"), "4566"), (Ids{0, 4, 2}));
}

TEST(BpeModel, SubwordPrefixAndWordSuffix) {
  json prefixed = model_spec({{"h", 0}, {"##e", 1}, {"##y", 2}, {"he", 3}}, {"h ##e"});
  prefixed["continuing_subword_prefix"] = "##";
  EXPECT_EQ(encode(BpeModel(prefixed, "t"), "hey"), (Ids{3, 2}));
  json suffixed = model_spec({{"h", 0}, {"e</w>", 1}, {"he</w>", 2}}, {"h e</w>"});
  suffixed["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(encode(BpeModel(suffixed, "t"), "he"), (Ids{2}));
}

TEST(BpeModel, TokenLookups) {
  BpeModel model(model_spec(kAbcVocab, {"b c"}), "test.json");
  EXPECT_EQ(model.token_to_id("bc"), 4);
  EXPECT_EQ(model.token_to_id("zz"), std::nullopt);
  ASSERT_NE(model.id_to_token(5), nullptr);
  EXPECT_EQ(*model.id_to_token(5), "abc");
  EXPECT_EQ(model.id_to_token(6), nullptr);
  EXPECT_EQ(model.max_id(), 5);
}

std::string model_error(const json& spec) {
  try {
    BpeModel model(spec, "ckpt/tokenizer.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(BpeModel, MergeWithUnknownTokenNamesEntryAndIndex) {
  EXPECT_EQ(model_error(model_spec(kAbcVocab, {"a b", "a zz"})),
            "merges entry 1 (\"a zz\") in ckpt/tokenizer.json refers to token 'zz' which is not "
            "in the vocabulary");
  EXPECT_EQ(model_error(model_spec(kAbcVocab, json::array({json::array({"c", "a"})}))),
            "merges entry 0 ([\"c\",\"a\"]) in ckpt/tokenizer.json refers to token 'ca' which is "
            "not in the vocabulary");
  EXPECT_EQ(model_error(model_spec(kAbcVocab, {"abc"})),
            "merges entry 0 (\"abc\") in ckpt/tokenizer.json is not two tokens (\"a b\" or "
            "[\"a\", \"b\"])");
}

TEST(BpeModel, OtherModelTypesAreRejected) {
  EXPECT_EQ(model_error({{"type", "Unigram"}, {"vocab", json::array()}}),
            "unsupported tokenizer model type 'Unigram' in ckpt/tokenizer.json (supported: BPE)");
  EXPECT_EQ(model_error({{"type", "WordPiece"}, {"vocab", json::object()}}),
            "unsupported tokenizer model type 'WordPiece' in ckpt/tokenizer.json (supported: BPE)");
}

TEST(BpeModel, DropoutIsRejected) {
  json spec = model_spec(kAbcVocab, json::array());
  spec["dropout"] = 0.1;
  EXPECT_NE(model_error(spec).find("dropout"), std::string::npos);
}

}  // namespace
}  // namespace streamrl::tokenizer
