#include "streamrl/tokenizer/normalizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {

using nlohmann::json;

std::string normalize(const json& spec, const std::string& text) {
  return parse_normalizer(spec, "test.json")->normalize(text);
}

TEST(Normalizer, NullMeansNone) { EXPECT_EQ(parse_normalizer(nullptr, "test.json"), nullptr); }

TEST(Normalizer, LlamaTwoPrependAndReplace) {
  const json spec = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "▁"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  EXPECT_EQ(normalize(spec, "Hello big world"), "▁Hello▁big▁world");
  EXPECT_EQ(normalize(spec, ""), "");
}

TEST(Normalizer, ReplaceWithRegex) {
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}},
                      "a  b    c"),
            "a b c");
}

TEST(Normalizer, NfcLowercaseStrip) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "Cafe\xCC\x81"), "Café");
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "ÉCOLE"), "école");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                      " \t hi there \n"),
            "hi there");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}, "  hi  "),
            "  hi");
}

TEST(Normalizer, UnsupportedTypeNamesFile) {
  try {
    parse_normalizer({{"type", "NFKC"}}, "m/tokenizer.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unsupported normalizer type 'NFKC' in m/tokenizer.json (supported: NFC, NFD, "
              "Lowercase, Prepend, Replace, Strip, Sequence)");
  }
}

}  // namespace
}  // namespace streamrl::tokenizer
