#include "streamrl/tokenizer/regex.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer {
namespace {

using Matches = std::vector<std::pair<std::size_t, std::size_t>>;

Matches matches(const Regex& regex, std::string_view text) {
  Matches out;
  regex.for_each_match(text, [&](std::size_t b, std::size_t e) { out.emplace_back(b, e); });
  return out;
}

TEST(Regex, EmptyMatchesFollowOnigurumaIteration) {
  // Oniguruma's find_iter on "abxxc": (0,0) (1,1) (2,4) (5,5); the empty match at 4, right after
  // the previous match, is skipped.
  EXPECT_EQ(matches(Regex("x*", false, "test"), "abxxc"),
            (Matches{{0, 0}, {1, 1}, {2, 4}, {5, 5}}));
}

TEST(Regex, UnicodePropertiesAndCharacters) {
  // Empty matches advance by a whole character, never into the middle of one.
  EXPECT_EQ(matches(Regex(R"(\p{L}+)", false, "test"), "中文 ab1"), (Matches{{0, 6}, {7, 9}}));
  EXPECT_EQ(matches(Regex(R"(\s)", false, "test"), "a\u00a0b\u3000"), (Matches{{1, 3}, {4, 7}}));
}

TEST(Regex, LiteralPatternsAreNotRegexes) {
  EXPECT_EQ(matches(Regex("a.b", true, "test"), "axb a.b"), (Matches{{4, 7}}));
}

TEST(Regex, MatchesAtStart) {
  Regex word(R"(\w)", false, "test");
  EXPECT_TRUE(word.matches_at_start("é,"));
  EXPECT_FALSE(word.matches_at_start(",é"));
}

TEST(Regex, VeryLongRunsDoNotExhaustTheStack) {
  const std::string text(1 << 20, 'a');
  Regex regex(R"([^\r\n\p{L}\p{N}]?\p{L}+|\s+(?!\S)|\s+)", false, "test");
  EXPECT_EQ(matches(regex, text), (Matches{{0, text.size()}}));
  // The last space goes with the letter: [^\r\n\p{L}\p{N}]?\p{L}+ matches " x".
  const std::string spaces = std::string(1 << 20, ' ') + "x";
  const std::size_t n = spaces.size();
  EXPECT_EQ(matches(regex, spaces), (Matches{{0, n - 2}, {n - 2, n}}));
}

TEST(Regex, BadPatternIsInputErrorNamingContext) {
  try {
    Regex regex("(a", false, "ckpt/tokenizer.json");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("invalid regex '(a' in ckpt/tokenizer.json"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace streamrl::tokenizer
