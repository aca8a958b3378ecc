// A parsed Jinja template, rendered with the semantics of transformers' chat-template environment
// (Python jinja2 with trim_blocks and lstrip_blocks, loop controls, its tojson and
// raise_exception/strftime_now globals). Covers what Hugging Face chat templates use: for (with
// loop.*, else, an if filter, break/continue), if/elif/else, set (also of namespace attributes and
// as a block), macro and call blocks, filter blocks, filters, tests, methods of strings, lists and
// dicts, slicing. Internal to tokenizer/.
#pragma once

#include <string>
#include <string_view>

#include "streamrl/tokenizer/jinja/ast.h"

namespace streamrl::tokenizer::jinja {

class Template {
 public:
  // Throws TemplateError on a syntax error.
  explicit Template(std::string_view source);

  // The output for `variables` (a dict of the template's global names). Throws TemplateError
  // "chat template line N: ..." when rendering fails, e.g. the template calls raise_exception.
  std::string render(const Object& variables) const;

 private:
  Block program_;
};

}  // namespace streamrl::tokenizer::jinja
