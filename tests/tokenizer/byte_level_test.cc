#include "streamrl/tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace streamrl::tokenizer::byte_level {
namespace {

TEST(ByteLevel, Gpt2Alphabet) {
  std::string out;
  append_mapped(std::string("A \n\x7f\xad\xff", 6), out);
  // Printable bytes map to themselves; the others to U+0100 onwards in byte order.
  EXPECT_EQ(out, "AĠĊġŃÿ");
}

TEST(ByteLevel, EveryByteRoundTripsThroughADistinctCharacter) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    std::string mapped, back;
    append_mapped(byte, mapped);
    seen.insert(mapped);
    ASSERT_TRUE(append_unmapped(mapped, back));
    EXPECT_EQ(back, byte);
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(ByteLevel, CharactersOutsideTheAlphabetAreRejected) {
  std::string out = "x";
  EXPECT_FALSE(append_unmapped("Ġ中", out));
  EXPECT_EQ(out, "x");
}

}  // namespace
}  // namespace streamrl::tokenizer::byte_level
