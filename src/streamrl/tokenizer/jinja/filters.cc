// Jinja's filters and tests, as transformers' environment has them (its tojson is json.dumps with
// ensure_ascii=False, no key sorting and no HTML escaping).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "streamrl/tokenizer/jinja/builtins.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer::jinja {
namespace {

std::string map_ascii(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string title(const std::string& s) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
    word_start = !std::isalnum(u) && u < 0x80;
  }
  return out;
}

// The value of `item`'s attribute path "a.b" (dict keys), undefined when absent.
Value attribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot - start);
    v = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)
            ? subscript(v, Value(static_cast<int64_t>(std::stoll(part))))
            : subscript(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Arguments from index `first` on (for a test or filter named by a select/map argument).
Args rest(const Args& a, size_t first) {
  Args out;
  if (a.positional.size() > first) {
    out.positional.assign(a.positional.begin() + first, a.positional.end());
  }
  out.keyword = a.keyword;
  return out;
}

// select/reject (attribute empty) and selectattr/rejectattr.
Value select(const Value& operand, const Args& a, bool by_attribute, bool keep) {
  const size_t test_at = by_attribute ? 1 : 0;
  const std::string attr = by_attribute ? a.get(0, "attribute").as_string() : "";
  const Value test = a.positional.size() > test_at ? a.positional[test_at] : Value();
  Array out;
  for (const Value& item : operand.iterate()) {
    const Value v = by_attribute ? attribute(item, attr) : item;
    const bool pass = test.is_undefined() ? v.truthy()
                                          : apply_test(test.as_string(), v,
                                                       rest(Args{a.positional, {}}, test_at + 1));
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value sequence_end(const Value& operand, bool first) {
  const Array items = operand.iterate();
  if (items.empty()) return Value();
  return first ? items.front() : items.back();
}

}  // namespace

Value apply_filter(const std::string& name, const Value& operand, const Args& a) {
  if (name == "trim") return Value(strip(operand.str(), a.get(0, "chars"), true, true));
  if (name == "upper") return Value(map_ascii(operand.str(), ::toupper));
  if (name == "lower") return Value(unicode::lowercase(operand.str()));
  if (name == "title") return Value(title(operand.str()));
  if (name == "capitalize") {
    std::string s = unicode::lowercase(operand.str());
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value(s);
  }
  if (name == "length" || name == "count") return Value(operand.length());
  if (name == "default" || name == "d") {
    const bool boolean = a.get(1, "boolean", Value(false)).truthy();
    const bool use_default = operand.is_undefined() || (boolean && !operand.truthy());
    return use_default ? a.get(0, "default_value", Value("")) : operand;
  }
  if (name == "string") return Value(operand.str());
  if (name == "list") return Value(operand.iterate());
  if (name == "first" || name == "last") return sequence_end(operand, name == "first");
  if (name == "reverse") {
    if (operand.is_string()) return slice(operand, Value(), Value(), Value(-1));
    Array items = operand.iterate();
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "items") {
    Array out;
    if (operand.is_undefined()) return Value(std::move(out));
    for (const auto& [k, v] : operand.object().entries) out.emplace_back(Array{Value(k), v});
    return Value(std::move(out));
  }
  if (name == "join") {
    const Value attr = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : operand.iterate()) {
      if (!first) out += a.get(0, "d", Value("")).str();
      out += (attr.is_undefined() ? item : attribute(item, attr.str())).str();
      first = false;
    }
    return Value(out);
  }
  if (name == "tojson") {
    const Value indent = a.get(0, "indent");
    return Value(operand.to_json(indent.is_undefined() || indent.is_none() ? -1 : indent.as_int(),
                                 a.get(1, "sort_keys", Value(false)).truthy()));
  }
  if (name == "replace") {
    return member(Value(operand.str()), "replace").function()(a);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return select(operand, a, true, name == "selectattr");
  }
  if (name == "select" || name == "reject") return select(operand, a, false, name == "select");
  if (name == "map") {
    const Value attr = a.get(99, "attribute");
    Array out;
    for (const Value& item : operand.iterate()) {
      if (!attr.is_undefined()) {
        const Value v = attribute(item, attr.str());
        out.push_back(v.is_undefined() ? a.get(99, "default") : v);
      } else {
        out.push_back(apply_filter(a.get(0, "filter").as_string(), item, rest(a, 1)));
      }
    }
    return Value(std::move(out));
  }
  if (name == "unique") {
    Array out;
    for (const Value& item : operand.iterate()) {
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    return Value(std::move(out));
  }
  if (name == "sort") {
    Array items = operand.iterate();
    const Value attr = a.get(2, "attribute");
    auto key = [&](const Value& v) { return attr.is_undefined() ? v : attribute(v, attr.str()); };
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& x, const Value& y) { return key(x).less(key(y)); });
    if (a.get(0, "reverse", Value(false)).truthy()) std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "int") {
    if (operand.is_number() || operand.is_bool())
      return Value(static_cast<int64_t>(operand.as_double()));
    try {
      return Value(static_cast<int64_t>(std::stoll(strip(operand.str(), Value(), true, true))));
    } catch (const std::exception&) {
      return a.get(0, "default", Value(0));
    }
  }
  if (name == "float") {
    if (operand.is_number() || operand.is_bool()) return Value(operand.as_double());
    try {
      return Value(std::stod(operand.str()));
    } catch (const std::exception&) {
      return a.get(0, "default", Value(0.0));
    }
  }
  if (name == "abs") {
    return operand.is_int() ? Value(static_cast<int64_t>(std::llabs(operand.as_int())))
                            : Value(std::fabs(operand.as_double()));
  }
  if (name == "round") {
    const double scale = std::pow(10.0, a.get(0, "precision", Value(0)).as_int());
    return Value(std::round(operand.as_double() * scale) / scale);
  }
  if (name == "safe") return operand;
  if (name == "indent") {
    const Value width = a.get(0, "width", Value(4));
    const std::string pad =
        width.is_string() ? width.as_string() : std::string(width.as_int(), ' ');
    const bool first = a.get(1, "first", Value(false)).truthy();
    const bool blank = a.get(2, "blank", Value(false)).truthy();
    const std::string s = operand.str();
    std::string out;
    size_t start = 0;
    for (bool first_line = true;; first_line = false) {
      const size_t nl = s.find('\n', start);
      const std::string line = s.substr(start, nl == std::string::npos ? nl : nl - start);
      if ((first_line ? first : (blank || !line.empty()))) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
    }
    return Value(out);
  }
  throw TemplateError("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, const Args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "iterable" || name == "sequence")
    return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.is_function();
  if (name == "odd" || name == "even") return (v.as_int() % 2 != 0) == (name == "odd");
  if (name == "divisibleby") return v.as_int() % a.get(0, "num").as_int() == 0;
  if (name == "lower") return v.is_string() && unicode::lowercase(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && map_ascii(v.as_string(), ::toupper) == v.as_string();
  const Value other = a.get(0, "other");
  if (name == "eq" || name == "equalto" || name == "==") return v == other;
  if (name == "sameas") return v == other && v.type_name() == other.type_name();
  if (name == "ne" || name == "!=") return !(v == other);
  if (name == "lt" || name == "lessthan" || name == "<") return v.less(other);
  if (name == "le" || name == "<=") return !other.less(v);
  if (name == "gt" || name == "greaterthan" || name == ">") return other.less(v);
  if (name == "ge" || name == ">=") return !v.less(other);
  if (name == "in") {
    for (const Value& item : a.get(0, "seq").iterate()) {
      if (item == v) return true;
    }
    return false;
  }
  throw TemplateError("unknown test '" + name + "'");
}

}  // namespace streamrl::tokenizer::jinja
