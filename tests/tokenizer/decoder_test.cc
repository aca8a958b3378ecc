#include "streamrl/tokenizer/decoder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {

using nlohmann::json;
using Tokens = std::vector<std::string>;

Tokens decode(const json& spec, Tokens tokens) {
  parse_decoder(spec, "test.json")->decode_chain(tokens);
  return tokens;
}

TEST(ByteLevelDecoder, MapsBackToBytesAndRepairsCutCharacters) {
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"Hello", "Ġmy", "Ġfriend", ",", "Ċ"}),
            (Tokens{"Hello my friend,\n"}));
  // The first two bytes of 中 (E4 B8 AD) only: one U+FFFD.
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"a", "ä¸"}), (Tokens{"a\xEF\xBF\xBD"}));
  // Tokens outside the byte-level alphabet (added tokens) keep their own bytes.
  EXPECT_EQ(decode({{"type", "ByteLevel"}}, {"你好", "Ġok"}), (Tokens{"你好 ok"}));
}

// The cases of Hugging Face's byte_fallback.rs tests.
TEST(ByteFallbackDecoder, JoinsByteRunsOrReplacesEachByte) {
  const json spec = {{"type", "ByteFallback"}};
  EXPECT_EQ(decode(spec, {"Hey", "friend!"}), (Tokens{"Hey", "friend!"}));
  EXPECT_EQ(decode(spec, {"<0x61>"}), (Tokens{"a"}));
  EXPECT_EQ(decode(spec, {"<0xE5>"}), (Tokens{"�"}));
  EXPECT_EQ(decode(spec, {"<0xE5>", "<0x8f>"}), (Tokens{"�", "�"}));
  EXPECT_EQ(decode(spec, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), (Tokens{"叫", "a"}));
  EXPECT_EQ(decode(spec, {"<0xE5>", "<0x8f>", "a"}), (Tokens{"�", "�", "a"}));
}

TEST(StripDecoder, StripsPerToken) {
  EXPECT_EQ(decode({{"type", "Strip"}, {"content", "H"}, {"start", 1}, {"stop", 0}},
                   {"Hey", " friend!", "HHH"}),
            (Tokens{"ey", " friend!", "HH"}));
  EXPECT_EQ(
      decode({{"type", "Strip"}, {"content", "y"}, {"start", 0}, {"stop", 1}}, {"Hey", " friend!"}),
      (Tokens{"He", " friend!"}));
}

TEST(MetaspaceDecoder, FirstTokenLosesItsPrefix) {
  EXPECT_EQ(decode({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}},
                   {"▁Hey", "▁friend!"}),
            (Tokens{"Hey", " friend!"}));
  EXPECT_EQ(decode({{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}},
                   {"▁Hey", "▁friend!"}),
            (Tokens{" Hey", " friend!"}));
}

TEST(SequenceDecoder, LlamaTwoChain) {
  const json spec = {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                       {{"type", "ByteFallback"}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode(spec, {"▁Hello", "▁", "<0xE4>", "<0xB8>", "<0xAD>"}), (Tokens{"Hello 中"}));
}

TEST(DecoderSpec, UnsupportedType) {
  EXPECT_THROW(parse_decoder({{"type", "WordPiece"}}, "test.json"), InputError);
}

}  // namespace
}  // namespace streamrl::tokenizer
