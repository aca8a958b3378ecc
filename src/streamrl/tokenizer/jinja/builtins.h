// What templates call by name: filters (x | trim), tests (x is defined), the methods of strings,
// lists and dicts (s.startswith("a"), d.items()) and the global functions (range, namespace,
// raise_exception, strftime_now, dict). Python's semantics; strings are UTF-8 and indexed by code
// point; upper/title/capitalize change ASCII letters only. Internal to tokenizer/.
#pragma once

#include <string>

#include "streamrl/tokenizer/jinja/value.h"

namespace streamrl::tokenizer::jinja {

// target.name: a dict's key, else the method of that name bound to target; undefined otherwise.
Value member(const Value& target, const std::string& name);
// target[key]: a list or string item (negative counts from the end) or a dict's key; undefined when
// absent.
Value subscript(const Value& target, const Value& key);
// target[start:stop:step] of a list or string; undefined bounds are None.
Value slice(const Value& target, const Value& start, const Value& stop, const Value& step);

// operand | name(args). Throws TemplateError for an unknown filter or bad arguments.
Value apply_filter(const std::string& name, const Value& operand, const Args& args);
// operand is name(args). Throws TemplateError for an unknown test.
bool apply_test(const std::string& name, const Value& operand, const Args& args);

// range, namespace, dict, raise_exception, strftime_now.
Object global_functions();

// Python's str.strip/lstrip/rstrip: whitespace when `chars` is undefined or None.
std::string strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace streamrl::tokenizer::jinja
