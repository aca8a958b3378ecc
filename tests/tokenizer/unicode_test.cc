#include "streamrl/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <string>

namespace streamrl::tokenizer::unicode {
namespace {

TEST(Utf8, ValidityAndRepairByMaximalSubparts) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("ñ 中 😀"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // a surrogate
  // A truncated 3-byte sequence is one maximal subpart: one U+FFFD, as Rust's from_utf8_lossy.
  EXPECT_EQ(to_valid_utf8("a\xE5\x8F"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(to_valid_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98\x80"), "😀");
}

TEST(Nfc, ComposesDecomposedCharacters) {
  EXPECT_EQ(nfc("e\xCC\x81"), "é");                              // e + COMBINING ACUTE
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "Å");                           // ANGSTROM SIGN, a singleton
  EXPECT_EQ(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "한");  // conjoining jamo
  EXPECT_EQ(nfc("already NFC: é 中文"), "already NFC: é 中文");
}

TEST(Nfc, ReordersMarksBeforeComposing) {
  // a + dot below (ccc 220) + circumflex (ccc 230) in either order is ậ.
  EXPECT_EQ(nfc("a\xCC\x82\xCC\xA3"), "ậ");
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x82"), "ậ");
}

TEST(Nfd, Decomposes) {
  EXPECT_EQ(nfd("é"), "e\xCC\x81");
  EXPECT_EQ(nfd("한"), "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");
}

TEST(Lowercase, FullUnicodeMapping) {
  EXPECT_EQ(lowercase("HeLLo ÀÉÎ ΣΑΣ Ж"), "hello àéî σασ ж");
  EXPECT_EQ(lowercase("İ"), "i\xCC\x87");
}

}  // namespace
}  // namespace streamrl::tokenizer::unicode
