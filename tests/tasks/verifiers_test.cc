// The named dataset verifiers and their parsers.
#include "streamrl/tasks/verifiers.h"

#include <gtest/gtest.h>

#include "streamrl/core/errors.h"

namespace streamrl::tasks {
namespace {

double score(std::string_view verifier, std::string_view reference, std::string_view completion) {
  return get_verifier(verifier).score(reference, completion);
}

TEST(Verifiers, RegistryAndUnknownName) {
  EXPECT_EQ(verifier_names(), (std::vector<std::string>{"exact", "numeric", "choice"}));
  try {
    get_verifier("regex");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("exact, numeric, choice"), std::string::npos);
  }
}

TEST(Trim, DropsSurroundingWhitespaceOnly) {
  EXPECT_EQ(trim(" \t a b \r\n"), "a b");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(trim(""), "");
}

TEST(ExactVerifier, TrimmedStringEquality) {
  EXPECT_EQ(score("exact", "Paris", "Paris"), 1.0);
  EXPECT_EQ(score("exact", " Paris\n", "\tParis  \n"), 1.0);
  EXPECT_EQ(score("exact", "Paris", "paris"), 0.0);
  EXPECT_EQ(score("exact", "Paris", "Paris."), 0.0);
  EXPECT_EQ(score("exact", "Paris", ""), 0.0);
  EXPECT_TRUE(get_verifier("exact").reference_error("  "));
  EXPECT_FALSE(get_verifier("exact").reference_error("x"));
}

TEST(LastNumber, ParsesIntegersDecimalsSignsAndThousands) {
  EXPECT_EQ(last_number("42"), 42.0);
  EXPECT_EQ(last_number("The answer is 42."), 42.0);
  EXPECT_EQ(last_number("from 3 to -17"), -17.0);
  EXPECT_EQ(last_number("-0.5"), -0.5);
  EXPECT_EQ(last_number("costs $1,234.50 total"), 1234.5);
  EXPECT_EQ(last_number("1,234,567"), 1234567.0);
  EXPECT_EQ(last_number("pi is 3.14159"), 3.14159);
  EXPECT_EQ(last_number("5 - 3 = 2, so 2"), 2.0);
}

TEST(LastNumber, CommasAndMinusSignsOnlyWhereUnambiguous) {
  EXPECT_EQ(last_number("1,2"), 2.0);        // a list, not thousands
  EXPECT_EQ(last_number("1,2345"), 2345.0);  // four digits after the comma
  EXPECT_EQ(last_number("5-3"), 3.0);        // subtraction, not -3
  EXPECT_EQ(last_number("x-3"), 3.0);
  EXPECT_EQ(last_number("(-3)"), -3.0);
  EXPECT_EQ(last_number("version 2."), 2.0);
  EXPECT_EQ(last_number(""), std::nullopt);
  EXPECT_EQ(last_number("no digits here"), std::nullopt);
}

TEST(NumericVerifier, LastNumberWithinRelativeTolerance) {
  EXPECT_EQ(score("numeric", "1234", "so the total is 1,234."), 1.0);
  EXPECT_EQ(score("numeric", "72", "48 + 24 = 72\n#### 72"), 1.0);
  EXPECT_EQ(score("numeric", "0.3", "0.30000000000000004"), 1.0);
  EXPECT_EQ(score("numeric", "2.5", "2.50"), 1.0);
  EXPECT_EQ(score("numeric", "-3", "it is -3"), 1.0);
  EXPECT_EQ(score("numeric", "-3", "it is 3"), 0.0);
  EXPECT_EQ(score("numeric", "100", "100.001"), 0.0);
  EXPECT_EQ(score("numeric", "0", "0"), 1.0);
  EXPECT_EQ(score("numeric", "0", "0.0000001"), 0.0);
  EXPECT_EQ(score("numeric", "72", "72 apples, I think 71"), 0.0);  // the last number counts
  EXPECT_EQ(score("numeric", "72", ""), 0.0);
  EXPECT_EQ(score("numeric", "72", "seventy-two"), 0.0);
  EXPECT_EQ(score("numeric", "72", "  72  \n\n"), 1.0);
  EXPECT_TRUE(get_verifier("numeric").reference_error("about ten"));
  EXPECT_FALSE(get_verifier("numeric").reference_error("10"));
}

TEST(ChoiceLetter, ExplicitAnswerWinsOverTheLastStandaloneLetter) {
  EXPECT_EQ(choice_letter("Answer: C"), 'C');
  EXPECT_EQ(choice_letter("The answer is (B). A is wrong because..."), 'B');
  EXPECT_EQ(choice_letter("answer:(D)"), 'D');
  EXPECT_EQ(choice_letter("I pick (E)"), 'E');
  EXPECT_EQ(choice_letter("B. Then again, maybe D"), 'D');
  EXPECT_EQ(choice_letter("A"), 'A');
}

TEST(ChoiceLetter, IgnoresLettersInsideWordsAndOutsideAToE) {
  EXPECT_EQ(choice_letter("ABC DEF"), std::nullopt);
  EXPECT_EQ(choice_letter("(F)"), std::nullopt);
  EXPECT_EQ(choice_letter("answer: b"), std::nullopt);
  EXPECT_EQ(choice_letter(""), std::nullopt);
  EXPECT_EQ(choice_letter("the answers are B and C"), 'C');
}

TEST(ChoiceVerifier, ComparesLetters) {
  EXPECT_EQ(score("choice", "B", "Answer: B"), 1.0);
  EXPECT_EQ(score("choice", "(B)", "so (B)"), 1.0);
  EXPECT_EQ(score("choice", "b", "B"), 1.0);
  EXPECT_EQ(score("choice", "B", "Answer: C"), 0.0);
  EXPECT_EQ(score("choice", "B", "no idea"), 0.0);
  EXPECT_EQ(score("choice", "B", ""), 0.0);
  EXPECT_TRUE(get_verifier("choice").reference_error("F"));
  EXPECT_TRUE(get_verifier("choice").reference_error("AB"));
  EXPECT_FALSE(get_verifier("choice").reference_error(" (C) "));
}

}  // namespace
}  // namespace streamrl::tasks
