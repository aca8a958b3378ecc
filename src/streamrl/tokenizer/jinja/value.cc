#include "streamrl/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer::jinja {

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

namespace {

template <typename Json>
Value value_from_json(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value(Value::None{});
    case Json::value_t::boolean:
      return Value(json.template get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return Value(json.template get<int64_t>());
    case Json::value_t::number_float:
      return Value(json.template get<double>());
    case Json::value_t::string:
      return Value(json.template get<std::string>());
    case Json::value_t::array: {
      Array items;
      for (const auto& item : json) items.push_back(value_from_json(item));
      return Value(std::move(items));
    }
    case Json::value_t::object: {
      Object object;
      for (const auto& [k, v] : json.items()) object.entries.emplace_back(k, value_from_json(v));
      return Value(std::move(object));
    }
    default:
      throw TemplateError("chat template variables: unsupported JSON value " + json.dump());
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& json) { return value_from_json(json); }

Value Value::from_json(const nlohmann::ordered_json& json) { return value_from_json(json); }

int64_t Value::as_int() const {
  if (is_int()) return std::get<int64_t>(v_);
  if (is_bool()) return as_bool() ? 1 : 0;
  throw TemplateError("expected an integer, got " + type_name());
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  if (is_int() || is_bool()) return static_cast<double>(as_int());
  throw TemplateError("expected a number, got " + type_name());
}

const std::string& Value::as_string() const {
  if (!is_string()) throw TemplateError("expected a string, got " + type_name());
  return std::get<std::string>(v_);
}

Array& Value::array() const {
  if (!is_array()) throw TemplateError("expected a list, got " + type_name());
  return *std::get<std::shared_ptr<Array>>(v_);
}

Object& Value::object() const {
  if (!is_object()) throw TemplateError("expected a dict, got " + type_name());
  return *std::get<std::shared_ptr<Object>>(v_);
}

bool Value::truthy() const {
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_array()) return !array().empty();
  if (is_object()) return !object().entries.empty();
  return is_function();
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  if (d == std::floor(d) && std::fabs(d) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.1f", d);
    return buf;
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, end);
}

namespace {

std::string quote_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out + q;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_repr(as_double());
  if (is_string()) return quote_repr(as_string());
  if (is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < array().size(); ++i) out += (i ? ", " : "") + array()[i].repr();
    return out + "]";
  }
  if (is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : object().entries) {
      out += (first ? "" : ", ") + quote_repr(k) + ": " + v.repr();
      first = false;
    }
    return out + "}";
  }
  return "<function>";
}

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  write_json(out, indent, sort_keys, 0);
  return out;
}

void Value::write_json(std::string& out, int indent, bool sort_keys, int depth) const {
  const std::string item_sep = indent >= 0 ? "," : ", ";
  const std::string pad = indent >= 0 ? "\n" + std::string(indent * depth, ' ') : "";
  const std::string inner = indent >= 0 ? pad + std::string(indent, ' ') : "";
  if (is_undefined() || is_none()) {
    out += "null";
  } else if (is_bool()) {
    out += as_bool() ? "true" : "false";
  } else if (is_int()) {
    out += std::to_string(as_int());
  } else if (is_float()) {
    const double d = as_double();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : float_repr(d);
  } else if (is_string()) {
    json_string(out, as_string());
  } else if (is_array()) {
    if (array().empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < array().size(); ++i) {
      out += (i ? item_sep : "") + inner;
      array()[i].write_json(out, indent, sort_keys, depth + 1);
    }
    out += pad + "]";
  } else if (is_object()) {
    auto entries = object().entries;
    if (entries.empty()) {
      out += "{}";
      return;
    }
    if (sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out += "{";
    for (size_t i = 0; i < entries.size(); ++i) {
      out += (i ? item_sep : "") + inner;
      json_string(out, entries[i].first);
      out += ": ";
      entries[i].second.write_json(out, indent, sort_keys, depth + 1);
    }
    out += pad + "}";
  } else {
    throw TemplateError("tojson: a function is not JSON serializable");
  }
}

std::string Value::type_name() const {
  static const char* kNames[] = {"undefined", "NoneType", "bool", "int",     "float",
                                 "str",       "list",     "dict", "function"};
  return kNames[v_.index()];
}

Array Value::iterate() const {
  if (is_array()) return array();
  if (is_object()) {
    Array keys;
    for (const auto& entry : object().entries) keys.emplace_back(entry.first);
    return keys;
  }
  if (is_string()) {
    Array chars;
    const std::string& s = as_string();
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = pos;
      pos += std::min(unicode::char_len(s[pos]), s.size() - pos);
      chars.emplace_back(s.substr(start, pos - start));
    }
    return chars;
  }
  if (is_undefined()) return {};
  throw TemplateError("'" + type_name() + "' object is not iterable");
}

int64_t Value::length() const {
  if (is_string()) {
    int64_t n = 0;
    for (unsigned char c : as_string()) n += (c & 0xC0) != 0x80;
    return n;
  }
  if (is_array()) return array().size();
  if (is_object()) return object().entries.size();
  if (is_undefined()) return 0;
  throw TemplateError("object of type '" + type_name() + "' has no len()");
}

bool Value::operator==(const Value& other) const {
  if ((is_number() || is_bool()) && (other.is_number() || other.is_bool())) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return as_int() == other.as_int();
  }
  if (v_.index() != other.v_.index()) return false;
  if (is_string()) return as_string() == other.as_string();
  if (is_array()) return array() == other.array();
  if (is_object()) {
    const auto& a = object().entries;
    const auto& b = other.object().entries;
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a) {
      const Value* w = other.object().find(k);
      if (!w || !(v == *w)) return false;
    }
    return true;
  }
  if (is_function()) return &function() == &other.function();
  return true;  // undefined == undefined, None == None
}

bool Value::less(const Value& other) const {
  if ((is_number() || is_bool()) && (other.is_number() || other.is_bool())) {
    return as_double() < other.as_double();
  }
  if (is_string() && other.is_string()) return as_string() < other.as_string();
  throw TemplateError("'<' not supported between " + type_name() + " and " + other.type_name());
}

Value Args::get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

}  // namespace streamrl::tokenizer::jinja
