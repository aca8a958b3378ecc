// The values a Jinja template computes with, with Python's semantics (transformers renders chat
// templates with Python's jinja2): lists and dicts are shared by reference, dicts keep insertion
// order, str() and json.dumps() print as Python does. Internal to tokenizer/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "streamrl/core/errors.h"

namespace streamrl::tokenizer::jinja {

// A template that cannot be parsed or fails while rendering (raise_exception, a type error).
class TemplateError : public InputError {
 public:
  using InputError::InputError;
};

class Value;
struct Args;
using Array = std::vector<Value>;
using Function = std::function<Value(const Args&)>;

// A dict (or a namespace(), which templates may assign attributes of) in insertion order.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

class Value {
 public:
  struct None {};
  Value() = default;  // undefined
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(size_t i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Array items) : v_(std::make_shared<Array>(std::move(items))) {}
  Value(Object object) : v_(std::make_shared<Object>(std::move(object))) {}
  Value(Function f) : v_(std::make_shared<Function>(std::move(f))) {}

  // JSON values; an ordered_json keeps its objects' key order, as Python's json.loads does.
  static Value from_json(const nlohmann::json& json);
  static Value from_json(const nlohmann::ordered_json& json);

  bool is_undefined() const { return v_.index() == 0; }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(v_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v_); }
  bool is_function() const { return std::holds_alternative<std::shared_ptr<Function>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  // An int, or a bool as 0/1 (Python's bool is an int). Throws TemplateError otherwise.
  int64_t as_int() const;
  double as_double() const;              // int, float or bool; throws TemplateError otherwise
  const std::string& as_string() const;  // throws TemplateError when not a string
  Array& array() const;                  // throws TemplateError when not a list
  Object& object() const;                // throws TemplateError when not a dict
  const Function& function() const { return *std::get<std::shared_ptr<Function>>(v_); }

  // Python's bool(): false for undefined, None, False, 0, "" and empty containers.
  bool truthy() const;
  // Python's str(): "" for undefined, "None", "True", 1.0 -> "1.0", ['a', 1], {'k': 'v'}.
  std::string str() const;
  std::string repr() const;
  // json.dumps(value, ensure_ascii=False, indent=indent (< 0: none), sort_keys=sort_keys).
  std::string to_json(int indent = -1, bool sort_keys = false) const;
  // Python's type name, for error messages.
  std::string type_name() const;
  // The items a for loop visits: a list's items, a dict's keys, a string's characters.
  Array iterate() const;
  // len(): code points of a string, items of a list or dict.
  int64_t length() const;

  // Python's ==: numbers by value (1 == 1.0 == True), lists and dicts element-wise.
  bool operator==(const Value& other) const;
  // Python's < on two numbers or two strings; TemplateError otherwise.
  bool less(const Value& other) const;

 private:
  void write_json(std::string& out, int indent, bool sort_keys, int depth) const;

  std::variant<std::monostate, None, bool, int64_t, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>, std::shared_ptr<Function>>
      v_;
};

// The arguments of a call: positional, then keyword (name=value) in the order written.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Positional argument `index`, else keyword argument `name`, else `fallback`.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
};

// Python's repr() of a float: "1.0", "0.1", "1e+16".
std::string float_repr(double d);

}  // namespace streamrl::tokenizer::jinja
