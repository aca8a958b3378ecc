// calc: exact integer arithmetic, checked against a reference evaluation of random expressions.
#include <gtest/gtest.h>

#include <random>

#include "streamrl/core/errors.h"
#include "streamrl/tools/calc_tool.h"

namespace streamrl::tools {
namespace {

std::string error_of(const std::string& expression) {
  try {
    evaluate_integer_expression(expression);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Calc, PrecedenceParenthesesAndSigns) {
  EXPECT_EQ(evaluate_integer_expression("2+3*4"), "14");
  EXPECT_EQ(evaluate_integer_expression("(2+3)*4"), "20");
  EXPECT_EQ(evaluate_integer_expression(" 10 - 4 - 3 "), "3");  // left-associative
  EXPECT_EQ(evaluate_integer_expression("-7*-(2+1)"), "21");
  EXPECT_EQ(evaluate_integer_expression("84/4/3"), "7");
  EXPECT_EQ(evaluate_integer_expression("17%5"), "2");
  EXPECT_EQ(evaluate_integer_expression("-17%5"), "-2");  // C's remainder: sign of the dividend
  EXPECT_EQ(evaluate_integer_expression("0"), "0");
  // Beyond 64 bits, exactly: 2^100 = 1267650600228229401496703205376.
  std::string pow = "1";
  for (int i = 0; i < 100; ++i) pow += "*2";
  EXPECT_EQ(evaluate_integer_expression(pow), "1267650600228229401496703205376");
  EXPECT_EQ(evaluate_integer_expression("99999999999999999999+1"), "100000000000000000000");
}

TEST(Calc, ErrorsNameTheProblem) {
  EXPECT_EQ(error_of("7/2"), "7/2 is not an integer at character 4");
  EXPECT_EQ(error_of("1/(2-2)"), "division by zero at character 8");
  EXPECT_EQ(error_of("2+"), "missing number at character 3");
  EXPECT_EQ(error_of("(1+2"), "missing ')' at character 5");
  EXPECT_EQ(error_of("1+2)"), "unexpected ')' at character 4");
  EXPECT_EQ(error_of("2^3"), "unexpected '^' at character 2");
  EXPECT_EQ(error_of("1.5+1"), "unexpected '.' at character 2");
  std::string big = "1";
  for (int i = 0; i < 130; ++i) big += "*2";
  EXPECT_NE(error_of(big).find("overflow"), std::string::npos);
  EXPECT_NE(error_of(std::string(100, '(') + "1" + std::string(100, ')')).find("nested too deep"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(3000, '1')).find("longer than"), std::string::npos);
}

// Random sums and products of small integers against int64 arithmetic.
TEST(Calc, MatchesReferenceArithmetic) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    int64_t total = 0, product = 0;
    const int terms = 1 + static_cast<int>(rng() % 8);
    for (int t = 0; t < terms; ++t) {
      const int64_t a = static_cast<int64_t>(rng() % 2001) - 1000;
      const int64_t b = static_cast<int64_t>(rng() % 201) - 100;
      product = a * b;
      total += product;
      text +=
          (t ? "+" : "") + std::string("(") + std::to_string(a) + ")*(" + std::to_string(b) + ")";
    }
    EXPECT_EQ(evaluate_integer_expression(text), std::to_string(total)) << text;
  }
}

}  // namespace
}  // namespace streamrl::tools
