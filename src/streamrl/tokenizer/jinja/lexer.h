// Splits a Jinja template into text and the tokens of its {{ }} and {% %} tags, applying the
// whitespace rules transformers renders chat templates with: one trailing newline dropped,
// trim_blocks and lstrip_blocks, and the "-" markers ({%- -%} {{- -}} {#- -#}) that strip all
// whitespace on their side. Comments are dropped. Internal to tokenizer/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace streamrl::tokenizer::jinja {

struct Token {
  enum class Kind {
    kText,         // literal template text (value)
    kOutputOpen,   // {{
    kOutputClose,  // }}
    kBlockOpen,    // {%
    kBlockClose,   // %}
    kName,         // identifier or keyword (value)
    kString,       // string literal, escapes resolved (value)
    kInteger,      // value: the digits
    kFloat,        // value: the literal
    kOperator,     // value: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEnd,
  };
  Kind kind;
  std::string value;
  int line = 1;
};

// Throws TemplateError "chat template line N: ..." for an unterminated tag or string or a
// character that starts no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace streamrl::tokenizer::jinja
