// The "#<integer>" answer marker of the built-in tasks.
#include "streamrl/tasks/answer.h"

#include <gtest/gtest.h>

namespace streamrl::tasks {
namespace {

TEST(MarkedAnswer, ReadsTheIntegerAfterTheFirstMarker) {
  EXPECT_EQ(find_marked_answer("17+5=22;22+230=252;#252"), "252");
  EXPECT_EQ(find_marked_answer("#-17"), "-17");
  EXPECT_EQ(find_marked_answer("#### 42"), "42");
}

TEST(MarkedAnswer, ToleratesSpacesAroundTheAnswer) {
  EXPECT_EQ(find_marked_answer("  1+2=3; #  3  \n"), "3");
  EXPECT_EQ(find_marked_answer("#\t7"), "7");
}

TEST(MarkedAnswer, IgnoresEverythingAfterTheAnswer) {
  EXPECT_EQ(find_marked_answer("#252\n#999"), "252");
  EXPECT_EQ(find_marked_answer("#252 and then some junk 17"), "252");
  EXPECT_EQ(find_marked_answer("#252abc"), "252");
}

TEST(MarkedAnswer, NoAnswerWithoutMarkerOrInteger) {
  EXPECT_EQ(find_marked_answer(""), std::nullopt);
  EXPECT_EQ(find_marked_answer("17+5=22"), std::nullopt);
  EXPECT_EQ(find_marked_answer("#"), std::nullopt);
  EXPECT_EQ(find_marked_answer("#-"), std::nullopt);
  EXPECT_EQ(find_marked_answer("#abc 252"), std::nullopt);
  // Only spaces and tabs may separate the marker from the answer, not a line break.
  EXPECT_EQ(find_marked_answer("#\n252"), std::nullopt);
  // The first marker decides: a later one cannot rescue a malformed first answer.
  EXPECT_EQ(find_marked_answer("#x;#252"), std::nullopt);
}

TEST(MarkedAnswer, ScoresExactCanonicalIntegers) {
  EXPECT_EQ(score_marked_answer("252", "17+5=22;22+230=252;#252"), 1.0);
  EXPECT_EQ(score_marked_answer("252", "#252 junk"), 1.0);
  EXPECT_EQ(score_marked_answer("252", "#0252"), 0.0);
  EXPECT_EQ(score_marked_answer("252", "#2520"), 0.0);
  EXPECT_EQ(score_marked_answer("252", "#25"), 0.0);
  EXPECT_EQ(score_marked_answer("252", "252"), 0.0);
  EXPECT_EQ(score_marked_answer("252", ""), 0.0);
  EXPECT_EQ(score_marked_answer("-3", "# -3"), 1.0);
}

}  // namespace
}  // namespace streamrl::tasks
