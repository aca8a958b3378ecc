// The syntax tree of a parsed Jinja template. Internal to tokenizer/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "streamrl/tokenizer/jinja/value.h"

namespace streamrl::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // items
    kDict,     // items: key, value, key, value, ...
    kAttr,     // items[0].name
    kIndex,    // items[0][items[1]]
    kSlice,    // items[0][items[1]:items[2]:items[3]], absent bounds null
    kCall,     // items[0](items[1..]); the last keywords.size() arguments are keyword arguments
    kFilter,   // items[0] | name(items[1..]), keywords as for kCall
    kTest,     // items[0] is [not] name(items[1..])
    kUnary,    // name ("not", "-", "+") items[0]
    kBinary,   // items[0] name items[1]; name is an operator, "and", "or", "in", "not in"
    kTernary,  // items[0] if items[1] else items[2] (null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::string> keywords;
  bool negated = false;  // kTest: "is not"
};

struct Stmt;
using Block = std::vector<Stmt>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // if expr: body else orelse (an elif is an if alone in orelse)
    kFor,          // for targets in expr [if condition]: body else orelse
    kSet,          // set targets = expr; with attribute: set targets[0].attribute = expr
    kSetBlock,     // set targets[0]: body
    kMacro,        // macro name(params = defaults): body
    kCallBlock,    // call(params) expr: body, the body being the macro's caller()
    kFilterBlock,  // filter expr (a kFilter on an empty operand): body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::string name;
  std::string attribute;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when it has none
  Block body;
  Block orelse;
};

}  // namespace streamrl::tokenizer::jinja
