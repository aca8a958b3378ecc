// Member access, subscripts, slices, string/list/dict methods and global functions.
#include "streamrl/tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <ctime>

#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer::jinja {
namespace {

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (const Value& c : Value(s).iterate()) out.push_back(c.as_string());
  return out;
}

bool is_python_space(const std::string& ch) {
  if (ch.size() == 1)
    return std::string_view(" \t\n\r\v\f\x1c\x1d\x1e\x1f").find(ch[0]) != std::string_view::npos;
  size_t pos = 0;
  return unicode::is_whitespace(unicode::next_code_point(ch, pos));
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Array out;
  if (sep.is_undefined() || sep.is_none()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
        out.emplace_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return Value(std::move(out));
  }
  const std::string& d = sep.as_string();
  if (d.empty()) throw TemplateError("split: empty separator");
  size_t start = 0;
  for (size_t at; (at = s.find(d, start)) != std::string::npos &&
                  (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit);
       start = at + d.size()) {
    out.emplace_back(s.substr(start, at - start));
  }
  out.emplace_back(s.substr(start));
  return Value(std::move(out));
}

bool affix_match(const std::string& s, const Value& affixes, bool prefix) {
  const Array candidates = affixes.is_array() ? affixes.array() : Array{affixes};
  for (const Value& a : candidates) {
    const std::string& x = a.as_string();
    if (x.size() <= s.size() && s.compare(prefix ? 0 : s.size() - x.size(), x.size(), x) == 0) {
      return true;
    }
  }
  return false;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t start = 0;
  for (size_t at; count != 0 && (at = s.find(from, start)) != std::string::npos; --count) {
    out += s.substr(start, at - start) + to;
    start = at + from.size();
  }
  return out + s.substr(start);
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&s](auto f) { return Value(Function([s, f](const Args& a) { return f(s, a); })); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([left, right](const std::string& s, const Args& a) {
      return Value(strip(s, a.get(0, "chars"), left, right));
    });
  }
  if (name == "split") {
    return bind([](const std::string& s, const Args& a) {
      return split(s, a.get(0, "sep"), a.get(1, "maxsplit", Value(-1)).as_int());
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([prefix](const std::string& s, const Args& a) {
      return Value(affix_match(s, a.get(0, "prefix"), prefix));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return bind([name](const std::string& s, const Args&) { return apply_filter(name, s, {}); });
  }
  if (name == "replace") {
    return bind([](const std::string& s, const Args& a) {
      return Value(replace(s, a.get(0, "old").as_string(), a.get(1, "new").as_string(),
                           a.get(2, "count", Value(-1)).as_int()));
    });
  }
  if (name == "find") {
    return bind([](const std::string& s, const Args& a) {
      const size_t at = s.find(a.get(0, "sub").as_string());
      return Value(at == std::string::npos ? int64_t{-1} : Value(s.substr(0, at)).length());
    });
  }
  if (name == "count") {
    return bind([](const std::string& s, const Args& a) {
      const std::string& sub = a.get(0, "sub").as_string();
      int64_t n = 0;
      for (size_t at = 0; !sub.empty() && (at = s.find(sub, at)) != std::string::npos;
           at += sub.size()) {
        ++n;
      }
      return Value(n);
    });
  }
  if (name == "join") {
    return bind([](const std::string& s, const Args& a) {
      return apply_filter("join", a.get(0, "iterable"), Args{{Value(s)}, {}});
    });
  }
  return Value();
}

int64_t clamp_index(const Value& bound, int64_t n, int64_t fallback, int64_t step) {
  if (bound.is_undefined() || bound.is_none()) return fallback;
  int64_t i = bound.as_int();
  if (i < 0) i += n;
  const int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
  return std::clamp(i, lo, hi);
}

}  // namespace

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cps = code_points(s);
  const bool whitespace = chars.is_undefined() || chars.is_none();
  std::vector<std::string> set;
  if (!whitespace) set = code_points(chars.as_string());
  auto strippable = [&](const std::string& c) {
    return whitespace ? is_python_space(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strippable(cps[begin])) ++begin;
  while (right && end > begin && strippable(cps[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

Value member(const Value& target, const std::string& name) {
  if (target.is_object()) {
    if (const Value* v = target.object().find(name)) return *v;
    if (target.object().is_namespace) return Value();
    const Value self = target;
    if (name == "items") {
      return Value(Function([self](const Args&) { return apply_filter("items", self, {}); }));
    }
    if (name == "keys")
      return Value(Function([self](const Args&) { return Value(self.iterate()); }));
    if (name == "values") {
      return Value(Function([self](const Args&) {
        Array out;
        for (const auto& entry : self.object().entries) out.push_back(entry.second);
        return Value(std::move(out));
      }));
    }
    if (name == "get") {
      return Value(Function([self](const Args& a) {
        const Value* v = self.object().find(a.get(0, "key").str());
        return v ? *v : a.get(1, "default", Value(Value::None{}));
      }));
    }
    return Value();
  }
  if (target.is_string()) return string_method(target.as_string(), name);
  if (target.is_array() && name == "append") {
    const Value self = target;
    return Value(Function([self](const Args& a) {
      self.array().push_back(a.get(0, "item"));
      return Value(Value::None{});
    }));
  }
  return Value();
}

Value subscript(const Value& target, const Value& key) {
  if (target.is_object()) {
    const Value* v = target.object().find(key.str());
    return v ? *v : member(target, key.str());
  }
  if ((target.is_array() || target.is_string()) && (key.is_int() || key.is_bool())) {
    const Array items = target.is_array() ? target.array() : target.iterate();
    int64_t i = key.as_int();
    if (i < 0) i += items.size();
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
    return items[i];
  }
  if (key.is_string()) return member(target, key.as_string());
  return Value();
}

Value slice(const Value& target, const Value& start, const Value& stop, const Value& step_value) {
  if (!target.is_array() && !target.is_string()) {
    throw TemplateError("cannot slice a " + target.type_name());
  }
  const Array items = target.iterate();
  const int64_t n = items.size();
  const int64_t step = step_value.is_undefined() || step_value.is_none() ? 1 : step_value.as_int();
  if (step == 0) throw TemplateError("slice step cannot be zero");
  int64_t i = clamp_index(start, n, step > 0 ? 0 : n - 1, step);
  const int64_t end = clamp_index(stop, n, step > 0 ? n : -1, step);
  Array out;
  for (; step > 0 ? i < end : i > end; i += step) out.push_back(items[i]);
  if (target.is_array()) return Value(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.as_string();
  return Value(s);
}

Object global_functions() {
  Object g;
  g.set("range", Value(Function([](const Args& a) {
          int64_t start = 0, stop = a.get(0, "stop").as_int(), step = 1;
          if (a.positional.size() >= 2) start = stop, stop = a.positional[1].as_int();
          if (a.positional.size() >= 3) step = a.positional[2].as_int();
          if (step == 0) throw TemplateError("range() step must not be zero");
          Array out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
          return Value(std::move(out));
        })));
  auto object_of = [](const Args& a, bool is_namespace) {
    Object o;
    o.is_namespace = is_namespace;
    for (const Value& p : a.positional) {
      for (const auto& [k, v] : p.object().entries) o.set(k, v);
    }
    for (const auto& [k, v] : a.keyword) o.set(k, v);
    return Value(std::move(o));
  };
  g.set("namespace", Value(Function([object_of](const Args& a) { return object_of(a, true); })));
  g.set("dict", Value(Function([object_of](const Args& a) { return object_of(a, false); })));
  g.set("raise_exception", Value(Function([](const Args& a) -> Value {
          throw TemplateError(a.get(0, "message").str());
        })));
  g.set("strftime_now", Value(Function([](const Args& a) {
          const std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[256];
          const size_t n =
              std::strftime(buf, sizeof buf, a.get(0, "format").as_string().c_str(), &local);
          return Value(std::string(buf, n));
        })));
  return g;
}

}  // namespace streamrl::tokenizer::jinja
