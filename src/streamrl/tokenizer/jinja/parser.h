// Parses the tokens of a Jinja template into statements. Internal to tokenizer/.
#pragma once

#include <vector>

#include "streamrl/tokenizer/jinja/ast.h"
#include "streamrl/tokenizer/jinja/lexer.h"

namespace streamrl::tokenizer::jinja {

// Throws TemplateError "chat template line N: ..." on a syntax error or an unsupported statement.
Block parse(const std::vector<Token>& tokens);

}  // namespace streamrl::tokenizer::jinja
