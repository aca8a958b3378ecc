// A recursive-descent parser with jinja2's operator precedence, loosest first: conditional
// expression, or, and, not, comparisons and in, + -, ~, * / // %, **, unary - +, then a primary
// with its postfixes (.attr, [index], (call)) and filters and tests.
#include "streamrl/tokenizer/jinja/parser.h"

#include <initializer_list>

namespace streamrl::tokenizer::jinja {
namespace {

using K = Token::Kind;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Block program() {
    std::string end;
    Block block = parse_block({}, end);
    return block;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError("chat template line " + std::to_string(peek().line) + ": " + what);
  }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == K::kOperator && peek(ahead).value == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == K::kName && peek(ahead).value == name;
  }
  bool accept_op(const char* op) { return is_op(op) ? (++i_, true) : false; }
  bool accept_name(const char* name) { return is_name(name) ? (++i_, true) : false; }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "'");
  }
  std::string expect_identifier() {
    if (peek().kind != K::kName) fail("expected a name");
    return t_[i_++].value;
  }
  void expect_block_close() {
    if (peek().kind != K::kBlockClose) fail("expected '%}'");
    ++i_;
  }
  static Stmt stmt(Stmt::Kind kind, int line) {
    Stmt s;
    s.kind = kind;
    s.line = line;
    return s;
  }
  static Stmt text_stmt(const Token& tok) {
    Stmt s = stmt(Stmt::Kind::kText, tok.line);
    s.text = tok.value;
    return s;
  }
  ExprPtr make(Expr::Kind kind, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = peek().line;
    e->name = std::move(name);
    return e;
  }

  // Statements until {% one-of-`ends` %}; `end` receives which keyword ended it ("" at the end).
  Block parse_block(std::initializer_list<const char*> ends, std::string& end) {
    Block block;
    while (true) {
      const Token& tok = peek();
      if (tok.kind == K::kEnd) {
        if (ends.size() != 0) fail("missing {% " + std::string(*(ends.end() - 1)) + " %}");
        end.clear();
        return block;
      }
      if (tok.kind == K::kText) {
        block.push_back(text_stmt(tok));
        ++i_;
      } else if (tok.kind == K::kOutputOpen) {
        ++i_;
        Stmt s = stmt(Stmt::Kind::kOutput, tok.line);
        s.expr = expression();
        if (peek().kind != K::kOutputClose) fail("expected '}}'");
        ++i_;
        block.push_back(std::move(s));
      } else if (tok.kind == K::kBlockOpen) {
        ++i_;
        for (const char* e : ends) {
          if (is_name(e)) {
            end = e;
            ++i_;
            return block;
          }
        }
        if (is_name("generation") || is_name("endgeneration")) {
          ++i_;  // transformers' assistant-mask markers render nothing
          expect_block_close();
          continue;
        }
        block.push_back(statement());
      } else {
        fail("unexpected token '" + tok.value + "'");
      }
    }
  }

  Stmt statement() {
    Stmt s = stmt(Stmt::Kind::kText, peek().line);
    const std::string keyword = expect_identifier();
    std::string end;
    if (keyword == "if") {
      s.kind = Stmt::Kind::kIf;
      if_chain(s);
    } else if (keyword == "for") {
      s.kind = Stmt::Kind::kFor;
      do s.targets.push_back(expect_identifier());
      while (accept_op(","));
      if (!accept_name("in")) fail("expected 'in'");
      s.expr = or_expr();
      if (accept_name("if")) s.condition = expression();
      expect_block_close();
      s.body = parse_block({"else", "endfor"}, end);
      if (end == "else") {
        expect_block_close();
        s.orelse = parse_block({"endfor"}, end);
      }
      expect_block_close();
    } else if (keyword == "set") {
      s.targets.push_back(expect_identifier());
      if (accept_op(".")) s.attribute = expect_identifier();
      while (accept_op(",")) s.targets.push_back(expect_identifier());
      if (accept_op("=")) {
        s.kind = Stmt::Kind::kSet;
        s.expr = tuple_or_expression();
        expect_block_close();
      } else {
        s.kind = Stmt::Kind::kSetBlock;
        expect_block_close();
        s.body = parse_block({"endset"}, end);
        expect_block_close();
      }
    } else if (keyword == "macro") {
      s.kind = Stmt::Kind::kMacro;
      s.name = expect_identifier();
      parameters(s);
      expect_block_close();
      s.body = parse_block({"endmacro"}, end);
      expect_block_close();
    } else if (keyword == "call") {
      s.kind = Stmt::Kind::kCallBlock;
      if (is_op("(")) parameters(s);
      s.expr = expression();
      expect_block_close();
      s.body = parse_block({"endcall"}, end);
      expect_block_close();
    } else if (keyword == "filter") {
      s.kind = Stmt::Kind::kFilterBlock;
      ExprPtr operand = make(Expr::Kind::kLiteral);
      s.expr = filter(std::move(operand));
      expect_block_close();
      s.body = parse_block({"endfilter"}, end);
      expect_block_close();
    } else if (keyword == "break" || keyword == "continue") {
      s.kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_close();
    } else {
      --i_;
      fail("unsupported statement '" + keyword + "'");
    }
    return s;
  }

  // After {% elif: the rest of the chain as a nested if, which consumes the final endif.
  Stmt statement_after_elif() {
    --i_;  // re-read "elif" as "if"
    Stmt s = stmt(Stmt::Kind::kIf, peek().line);
    ++i_;
    if_chain(s);
    return s;
  }

  // The rest of an if (or elif) after its keyword: condition, body, then elif (a nested if that
  // consumes the endif), else, or endif.
  void if_chain(Stmt& s) {
    std::string end;
    s.expr = expression();
    expect_block_close();
    s.body = parse_block({"elif", "else", "endif"}, end);
    if (end == "elif") {
      s.orelse.push_back(statement_after_elif());
    } else if (end == "else") {
      expect_block_close();
      s.orelse = parse_block({"endif"}, end);
      expect_block_close();
    } else {
      expect_block_close();
    }
  }

  void parameters(Stmt& s) {
    expect_op("(");
    while (!accept_op(")")) {
      s.params.push_back(expect_identifier());
      s.defaults.push_back(accept_op("=") ? expression() : nullptr);
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr tuple_or_expression() {
    ExprPtr first = expression();
    if (!is_op(",")) return first;
    ExprPtr list = make(Expr::Kind::kList);
    list->items.push_back(std::move(first));
    while (accept_op(",")) list->items.push_back(expression());
    return list;
  }

  ExprPtr expression() {
    ExprPtr e = or_expr();
    if (!accept_name("if")) return e;
    ExprPtr t = make(Expr::Kind::kTernary);
    t->items.push_back(std::move(e));
    t->items.push_back(or_expr());
    t->items.push_back(accept_name("else") ? expression() : nullptr);
    return t;
  }

  ExprPtr binary(ExprPtr left, std::string op, ExprPtr right) {
    ExprPtr e = make(Expr::Kind::kBinary, std::move(op));
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary(std::move(e), "or", and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary(std::move(e), "and", not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (!accept_name("not")) return comparison();
    ExprPtr e = make(Expr::Kind::kUnary, "not");
    e->items.push_back(not_expr());
    return e;
  }
  ExprPtr comparison() {
    ExprPtr e = additive();
    while (true) {
      if (peek().kind == K::kOperator &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        std::string op = t_[i_++].value;
        e = binary(std::move(e), op, additive());
      } else if (accept_name("in")) {
        e = binary(std::move(e), "in", additive());
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        e = binary(std::move(e), "not in", additive());
      } else {
        return e;
      }
    }
  }
  ExprPtr additive() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[i_++].value;
      e = binary(std::move(e), op, concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = multiplicative();
    while (accept_op("~")) e = binary(std::move(e), "~", multiplicative());
    return e;
  }
  ExprPtr multiplicative() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[i_++].value;
      e = binary(std::move(e), op, power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept_op("**")) e = binary(std::move(e), "**", unary());
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      ExprPtr e = make(Expr::Kind::kUnary, t_[i_++].value);
      e->items.push_back(unary());
      return filters_and_tests(std::move(e));
    }
    return filters_and_tests(postfix(primary()));
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        e = filter(std::move(e));
      } else if (accept_name("is")) {
        ExprPtr t = make(Expr::Kind::kTest);
        t->negated = accept_name("not");
        // "none", "true", "false" and their Python spellings name tests here, not literals.
        t->name = expect_identifier();
        t->items.push_back(std::move(e));
        if (is_op("(")) {
          arguments(*t);
        } else if (peek().kind == K::kString || peek().kind == K::kInteger ||
                   peek().kind == K::kFloat ||
                   (peek().kind == K::kName && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("is") && !is_name("in") &&
                    !is_name("not"))) {
          t->items.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  ExprPtr filter(ExprPtr operand) {
    ExprPtr f = make(Expr::Kind::kFilter);
    f->name = expect_identifier();
    f->items.push_back(std::move(operand));
    if (is_op("(")) arguments(*f);
    return f;
  }

  // ( positional..., name=value... ) appended to call.items / call.keywords.
  void arguments(Expr& call) {
    expect_op("(");
    while (!accept_op(")")) {
      if (peek().kind == K::kName && is_op("=", 1)) {
        call.keywords.push_back(t_[i_].value);
        i_ += 2;
        call.items.push_back(expression());
      } else {
        if (!call.keywords.empty()) fail("positional argument after a keyword argument");
        call.items.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        ExprPtr a = make(Expr::Kind::kAttr, expect_identifier());
        a->items.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        ExprPtr c = make(Expr::Kind::kCall);
        c->items.push_back(std::move(e));
        arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target) {
    ExprPtr bounds[3];
    int part = 0;
    bool slice = false;
    while (!accept_op("]")) {
      if (accept_op(":")) {
        slice = true;
        if (++part > 2) fail("a slice has at most three parts");
      } else {
        if (bounds[part]) fail("expected ':' or ']'");
        bounds[part] = expression();
      }
    }
    if (!slice) {
      if (!bounds[0]) fail("empty subscript");
      ExprPtr e = make(Expr::Kind::kIndex);
      e->items.push_back(std::move(target));
      e->items.push_back(std::move(bounds[0]));
      return e;
    }
    ExprPtr e = make(Expr::Kind::kSlice);
    e->items.push_back(std::move(target));
    for (auto& b : bounds) e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr primary() {
    const Token& tok = peek();
    ExprPtr e = make(Expr::Kind::kLiteral);
    switch (tok.kind) {
      case K::kString:
        // Adjacent string literals concatenate, as in Python.
        while (peek().kind == K::kString) e->literal = e->literal.str() + t_[i_++].value;
        return e;
      case K::kInteger:
        e->literal = Value(static_cast<int64_t>(std::stoll(t_[i_++].value)));
        return e;
      case K::kFloat:
        e->literal = Value(std::stod(t_[i_++].value));
        return e;
      case K::kName: {
        const std::string& n = t_[i_++].value;
        if (n == "true" || n == "True")
          e->literal = Value(true);
        else if (n == "false" || n == "False")
          e->literal = Value(false);
        else if (n == "none" || n == "None")
          e->literal = Value(Value::None{});
        else
          e = make(Expr::Kind::kName, n);
        return e;
      }
      case K::kOperator:
        break;
      default:
        fail("unexpected end of expression");
    }
    if (accept_op("(")) {
      ExprPtr inner = tuple_or_expression();
      expect_op(")");
      return inner;
    }
    if (accept_op("[")) {
      e->kind = Expr::Kind::kList;
      while (!accept_op("]")) {
        e->items.push_back(expression());
        if (!is_op("]")) expect_op(",");
      }
      return e;
    }
    if (accept_op("{")) {
      e->kind = Expr::Kind::kDict;
      while (!accept_op("}")) {
        e->items.push_back(expression());
        expect_op(":");
        e->items.push_back(expression());
        if (!is_op("}")) expect_op(",");
      }
      return e;
    }
    fail("unexpected '" + tok.value + "'");
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
};

}  // namespace

Block parse(const std::vector<Token>& tokens) { return Parser(tokens).program(); }

}  // namespace streamrl::tokenizer::jinja
