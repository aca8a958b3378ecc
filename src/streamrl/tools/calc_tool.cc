#include "streamrl/tools/calc_tool.h"

#include <algorithm>
#include <cctype>

#include "streamrl/core/errors.h"

namespace streamrl::tools {
namespace {

using Int = __int128;
const Int kMin = static_cast<Int>(static_cast<unsigned __int128>(1) << 127);

constexpr size_t kMaxLength = 2000;
constexpr int kMaxDepth = 64;  // nested parentheses and unary signs (the parser recurses)

std::string to_decimal(Int v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  std::string digits;
  while (v != 0) {
    const int d = static_cast<int>(v % 10);
    digits.push_back(static_cast<char>('0' + (d < 0 ? -d : d)));
    v /= 10;
  }
  if (negative) digits.push_back('-');
  std::reverse(digits.begin(), digits.end());
  return digits;
}

// Recursive descent: expr = term {(+|-) term}; term = unary {(*|/|%) unary};
// unary = (+|-) unary | number | "(" expr ")".
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Int parse() {
    const Int v = expr(0);
    skip_space();
    if (pos_ < s_.size()) fail(std::string("unexpected '") + s_[pos_] + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(what + " at character " + std::to_string(pos_ + 1));
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  [[noreturn]] static void overflow() {
    throw InputError("overflow (the result needs more than 127 bits)");
  }
  static Int add(Int a, Int b) {
    Int r;
    if (__builtin_add_overflow(a, b, &r)) overflow();
    return r;
  }
  static Int sub(Int a, Int b) {
    Int r;
    if (__builtin_sub_overflow(a, b, &r)) overflow();
    return r;
  }
  static Int mul(Int a, Int b) {
    Int r;
    if (__builtin_mul_overflow(a, b, &r)) overflow();
    return r;
  }

  Int expr(int depth) {
    Int v = term(depth);
    while (true) {
      if (eat('+')) {
        v = add(v, term(depth));
      } else if (eat('-')) {
        v = sub(v, term(depth));
      } else {
        return v;
      }
    }
  }

  Int term(int depth) {
    Int v = unary(depth);
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || (s_[pos_] != '*' && s_[pos_] != '/' && s_[pos_] != '%')) return v;
      const char op = s_[pos_++];
      const Int rhs = unary(depth);
      if (op == '*') {
        v = mul(v, rhs);
        continue;
      }
      if (rhs == 0) fail("division by zero");
      // The one quotient that does not fit: the most negative value divided by -1.
      if (rhs == -1 && v == kMin) overflow();
      if (op == '/' && v % rhs != 0) {
        fail(to_decimal(v) + "/" + to_decimal(rhs) + " is not an integer");
      }
      v = op == '/' ? v / rhs : v % rhs;
    }
  }

  Int unary(int depth) {
    if (depth > kMaxDepth) fail("nested too deep");
    if (eat('-')) {
      return sub(0, unary(depth + 1));
    }
    if (eat('+')) return unary(depth + 1);
    if (eat('(')) {
      const Int v = expr(depth + 1);
      if (!eat(')')) fail("missing ')'");
      return v;
    }
    skip_space();
    if (pos_ >= s_.size()) fail("missing number");
    if (!std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      fail(std::string("unexpected '") + s_[pos_] + "'");
    }
    Int v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = add(mul(v, 10), s_[pos_] - '0');
      ++pos_;
    }
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string evaluate_integer_expression(std::string_view expression) {
  if (expression.size() > kMaxLength) {
    throw InputError("expression longer than " + std::to_string(kMaxLength) + " characters");
  }
  return to_decimal(Parser(expression).parse());
}

nlohmann::json CalcTool::schema() const {
  return {{"type", "function"},
          {"function",
           {{"name", "calc"},
            {"description", "Exact integer arithmetic: + - * / % and parentheses."},
            {"parameters",
             {{"type", "object"},
              {"properties",
               {{"expression", {{"type", "string"}, {"description", "e.g. 12*(7+5)-3"}}}}},
              {"required", {"expression"}}}}}}};
}

std::string CalcTool::run(const nlohmann::json& arguments) const {
  if (!arguments.is_object() || !arguments.contains("expression") ||
      !arguments["expression"].is_string()) {
    throw InputError("calc needs {\"expression\": string}");
  }
  return evaluate_integer_expression(arguments["expression"].get<std::string>());
}

}  // namespace streamrl::tools
