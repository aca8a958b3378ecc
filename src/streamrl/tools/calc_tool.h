// `calc`: exact integer arithmetic on an expression ("12*(7+5)-3"): + - * / % and parentheses,
// in 128-bit integers. `/` must divide exactly and overflow is an error, never a wrong number.
#pragma once

#include <string>
#include <string_view>

#include "streamrl/tools/tool.h"

namespace streamrl::tools {

// The value of `expression` in decimal; InputError naming the problem (bad character, unbalanced
// parenthesis, division by zero, inexact division, overflow, too long or too deep).
std::string evaluate_integer_expression(std::string_view expression);

class CalcTool : public Tool {
 public:
  std::string name() const override { return "calc"; }
  nlohmann::json schema() const override;
  // arguments: {"expression": "..."}.
  std::string run(const nlohmann::json& arguments) const override;
};

}  // namespace streamrl::tools
