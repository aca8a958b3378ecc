// Tree-walking evaluation. Scopes follow jinja2: a for loop and a macro call open a scope (a set
// inside them does not leak out, hence namespace()), an if does not.
#include "streamrl/tokenizer/jinja/template.h"

#include <cmath>
#include <unordered_map>

#include "streamrl/tokenizer/jinja/builtins.h"
#include "streamrl/tokenizer/jinja/parser.h"

namespace streamrl::tokenizer::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  Value lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return Value();
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Value arithmetic(const std::string& op, const Value& l, const Value& r) {
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value(l.as_string() + r.as_string());
    if (l.is_array() && r.is_array()) {
      Array out = l.array();
      out.insert(out.end(), r.array().begin(), r.array().end());
      return Value(std::move(out));
    }
  }
  if (op == "*" && (l.is_string() || l.is_array()) && r.is_int()) {
    if (l.is_string()) {
      std::string out;
      for (int64_t i = 0; i < r.as_int(); ++i) out += l.as_string();
      return Value(out);
    }
    Array out;
    for (int64_t i = 0; i < r.as_int(); ++i)
      out.insert(out.end(), l.array().begin(), l.array().end());
    return Value(std::move(out));
  }
  const bool numeric = (l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool());
  if (!numeric) {
    throw TemplateError("unsupported operand types for " + op + ": '" + l.type_name() + "' and '" +
                        r.type_name() + "'");
  }
  const bool ints = !l.is_float() && !r.is_float();
  const double x = l.as_double(), y = r.as_double();
  if ((op == "/" || op == "//" || op == "%") && y == 0) throw TemplateError("division by zero");
  if (op == "/") return Value(x / y);
  if (ints) {
    const int64_t a = l.as_int(), b = r.as_int();
    if (op == "+") return Value(a + b);
    if (op == "-") return Value(a - b);
    if (op == "*") return Value(a * b);
    if (op == "//") return Value(static_cast<int64_t>(std::floor(x / y)));
    if (op == "%") return Value(((a % b) + b) % b);
    if (op == "**" && b >= 0) return Value(static_cast<int64_t>(std::llround(std::pow(x, y))));
  }
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "//") return Value(std::floor(x / y));
  if (op == "%") return Value(x - y * std::floor(x / y));
  return Value(std::pow(x, y));
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string())
    return container.as_string().find(item.as_string()) != std::string::npos;
  if (container.is_object()) return container.object().find(item.str()) != nullptr;
  if (container.is_undefined()) return false;
  for (const Value& v : container.iterate()) {
    if (v == item) return true;
  }
  return false;
}

class Renderer {
 public:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Block& block, const ScopePtr& scope, std::string& out) {
    for (const Stmt& s : block) {
      Flow flow;
      try {
        flow = exec(s, scope, out);
      } catch (const TemplateError& e) {
        const std::string what = e.what();
        if (what.rfind("chat template line ", 0) == 0) throw;
        throw TemplateError("chat template line " + std::to_string(s.line) + ": " + what);
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        break;
      case Stmt::Kind::kOutput:
        out += eval(*s.expr, scope).str();
        break;
      case Stmt::Kind::kIf:
        return exec(eval(*s.expr, scope).truthy() ? s.body : s.orelse, scope, out);
      case Stmt::Kind::kFor:
        return exec_for(s, scope, out);
      case Stmt::Kind::kSet:
        assign(s, eval(*s.expr, scope), scope);
        break;
      case Stmt::Kind::kSetBlock: {
        std::string text;
        exec(s.body, scope, text);
        scope->vars[s.targets[0]] = Value(text);
        break;
      }
      case Stmt::Kind::kMacro:
        scope->vars[s.name] = macro(s, scope);
        break;
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        if (call.kind != Expr::Kind::kCall) throw TemplateError("call block needs a macro call");
        Args args = arguments(call, scope);
        args.keyword.emplace_back("caller", macro(s, scope));
        out += eval(*call.items[0], scope).function()(args).str();
        break;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string text;
        exec(s.body, scope, text);
        out += apply_filter(s.expr->name, Value(text), arguments(*s.expr, scope)).str();
        break;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void assign(const Stmt& s, const Value& v, const ScopePtr& scope) {
    if (!s.attribute.empty()) {
      const Value target = scope->lookup(s.targets[0]);
      if (!target.is_object() || !target.object().is_namespace) {
        throw TemplateError("cannot assign attribute on '" + s.targets[0] + "' (not a namespace)");
      }
      target.object().set(s.attribute, v);
    } else if (s.targets.size() == 1) {
      scope->vars[s.targets[0]] = v;
    } else {
      unpack(s.targets, v, *scope);
    }
  }

  static void unpack(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = v;
      return;
    }
    const Array items = v.iterate();
    if (items.size() != targets.size()) {
      throw TemplateError("cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < items.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const ScopePtr inner = child(scope);
    Array items;
    for (const Value& item : eval(*s.expr, scope).iterate()) {
      if (s.condition) {
        unpack(s.targets, item, *inner);
        if (!eval(*s.condition, inner).truthy()) continue;
      }
      items.push_back(item);
    }
    const int64_t n = items.size();
    for (int64_t i = 0; i < n; ++i) {
      unpack(s.targets, items[i], *inner);
      Object loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("revindex", Value(n - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[i - 1] : Value());
      loop.set("nextitem", i + 1 < n ? items[i + 1] : Value());
      loop.set("cycle", Value(Function([i](const Args& a) {
                 if (a.positional.empty()) throw TemplateError("loop.cycle needs arguments");
                 return a.positional[i % a.positional.size()];
               })));
      inner->vars["loop"] = Value(std::move(loop));
      if (exec(s.body, inner, out) == Flow::kBreak) break;
    }
    if (n == 0) return exec(s.orelse, scope, out);
    return Flow::kNormal;
  }

  // A macro (or a call block's caller) as a function rendering its body in a scope of its own.
  Value macro(const Stmt& s, const ScopePtr& defined_in) {
    return Value(Function([this, &s, defined_in](const Args& a) {
      const ScopePtr scope = child(defined_in);
      for (size_t i = 0; i < s.params.size(); ++i) {
        Value v = a.get(i, s.params[i]);
        if (v.is_undefined() && s.defaults[i]) v = eval(*s.defaults[i], scope);
        scope->vars[s.params[i]] = v;
      }
      for (const auto& [k, v] : a.keyword) {
        if (k == "caller") scope->vars[k] = v;
      }
      std::string text;
      exec(s.body, scope, text);
      return Value(text);
    }));
  }

  Args arguments(const Expr& call, const ScopePtr& scope) {
    Args args;
    const size_t first_keyword = call.items.size() - call.keywords.size();
    for (size_t i = 1; i < call.items.size(); ++i) {
      Value v = eval(*call.items[i], scope);
      if (i < first_keyword) {
        args.positional.push_back(std::move(v));
      } else {
        args.keyword.emplace_back(call.keywords[i - first_keyword], std::move(v));
      }
    }
    return args;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return scope->lookup(e.name);
      case Expr::Kind::kList: {
        Array items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Object object;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          object.set(eval(*e.items[i], scope).str(), eval(*e.items[i + 1], scope));
        }
        return Value(std::move(object));
      }
      case Expr::Kind::kAttr:
        return member(eval(*e.items[0], scope), e.name);
      case Expr::Kind::kIndex:
        return subscript(eval(*e.items[0], scope), eval(*e.items[1], scope));
      case Expr::Kind::kSlice: {
        auto bound = [&](size_t i) { return e.items[i] ? eval(*e.items[i], scope) : Value(); };
        return slice(eval(*e.items[0], scope), bound(1), bound(2), bound(3));
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.items[0], scope);
        if (!callee.is_function())
          throw TemplateError("'" + callee.type_name() + "' is not callable");
        return callee.function()(arguments(e, scope));
      }
      case Expr::Kind::kFilter:
        return apply_filter(e.name, eval(*e.items[0], scope), arguments(e, scope));
      case Expr::Kind::kTest:
        return Value(apply_test(e.name, eval(*e.items[0], scope), arguments(e, scope)) !=
                     e.negated);
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.items[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        if (e.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_double());
      }
      case Expr::Kind::kTernary:
        if (eval(*e.items[1], scope).truthy()) return eval(*e.items[0], scope);
        return e.items[2] ? eval(*e.items[2], scope) : Value();
      case Expr::Kind::kBinary:
        return binary(e, scope);
    }
    return Value();
  }

  Value binary(const Expr& e, const ScopePtr& scope) {
    const Value l = eval(*e.items[0], scope);
    if (e.name == "and") return l.truthy() ? eval(*e.items[1], scope) : l;
    if (e.name == "or") return l.truthy() ? l : eval(*e.items[1], scope);
    const Value r = eval(*e.items[1], scope);
    if (e.name == "==") return Value(l == r);
    if (e.name == "!=") return Value(!(l == r));
    if (e.name == "<") return Value(l.less(r));
    if (e.name == ">") return Value(r.less(l));
    if (e.name == "<=") return Value(!r.less(l));
    if (e.name == ">=") return Value(!l.less(r));
    if (e.name == "in") return Value(contains(r, l));
    if (e.name == "not in") return Value(!contains(r, l));
    if (e.name == "~") return Value(l.str() + r.str());
    return arithmetic(e.name, l, r);
  }
};

}  // namespace

Template::Template(std::string_view source) : program_(parse(tokenize(source))) {}

std::string Template::render(const Object& variables) const {
  auto globals = std::make_shared<Scope>();
  for (const auto& [k, v] : global_functions().entries) globals->vars[k] = v;
  for (const auto& [k, v] : variables.entries) globals->vars[k] = v;
  Renderer renderer;
  std::string out;
  renderer.exec(program_, child(globals), out);
  return out;
}

}  // namespace streamrl::tokenizer::jinja
