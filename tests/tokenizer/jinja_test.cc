// Tests of the Jinja interpreter on small templates whose output jinja2 gives (worked out by hand
// from Python's semantics): whitespace control, loops, scoping, macros, filters, tests, errors.
#include "streamrl/tokenizer/jinja/template.h"

#include <gtest/gtest.h>

namespace streamrl::tokenizer::jinja {
namespace {

std::string render(const std::string& source,
                   const nlohmann::json& vars = nlohmann::json::object()) {
  return Template(source).render(Value::from_json(vars).object());
}

TEST(JinjaTest, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
  EXPECT_EQ(render("{% if true %}\n  a\n    {% endif %}\nb\n"), "  a\nb");
  EXPECT_EQ(render("x  {{- ' y ' -}}  \n z"), "x y z");
  EXPECT_EQ(render("a {#- note -#} b{# c #}"), "ab");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");  // no trim after }}
}

TEST(JinjaTest, LoopVariablesFilterElseAndBreak) {
  const nlohmann::json v = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(
      render("{% for x in xs %}{{ loop.index }}{{ x }}{{ '|' if not loop.last }}{% endfor %}", v),
      "1a|2b|3c");
  EXPECT_EQ(
      render("{% for x in xs if x != 'b' %}{{ loop.index0 }}/{{ loop.length }}{{ x }} {% endfor %}",
             v),
      "0/2a 1/2c ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      render("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", v),
      "a");
  EXPECT_EQ(render("{% for x in xs %}{% if loop.first %}{% continue %}{% endif %}{{ loop.previtem "
                   "}}{% endfor %}",
                   v),
            "ab");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
}

TEST(JinjaTest, SetInLoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set n = 0 %}{% for i in range(3) %}{% set n = n + i %}{% endfor %}{{ n }}"),
            "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}{% set t %}x{{ a }}{% endset %}{{ t }}"),
            "21x1");
}

TEST(JinjaTest, MacrosAndCallBlocks) {
  EXPECT_EQ(render("{% macro tag(name, x='?') %}<{{ name }}:{{ x }}>{% endmacro %}"
                   "{{ tag('a') }}{{ tag('b', x=2) }}"),
            "<a:?><b:2>");
  EXPECT_EQ(
      render("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}in{% endcall %}"),
      "[in]");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(JinjaTest, Filters) {
  EXPECT_EQ(render("{{ '  a b \n' | trim }}|{{ 'ab' | upper }}|{{ 'AB c' | lower | capitalize }}"),
            "a b|AB|Ab c");
  EXPECT_EQ(render("{{ [1, 2, 3] | length }}{{ 'héllo' | length }}{{ x | default('d') }}{{ '' | "
                   "default('e', true) }}"),
            "35de");
  EXPECT_EQ(
      render(
          "{{ ['a', 'b'] | join(', ') }}|{{ [1, 2] | first }}{{ [1, 2] | last }}|{{ 3 | string }}"),
      "a, b|12|3");
  const nlohmann::json v = {{"ms", {{{"role", "system"}, {"c", 1}}, {{"role", "user"}, {"c", 2}}}}};
  EXPECT_EQ(
      render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}", v),
      "[2]");
  EXPECT_EQ(render("{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='role') | join }}", v),
            "system");
  EXPECT_EQ(render("{{ {'a': [1, 2.5, none, true], 'b': 'é\"'} | tojson }}"),
            "{\"a\": [1, 2.5, null, true], \"b\": \"é\\\"\"}");
  EXPECT_EQ(render("{{ {'a': [1], 'e': {}} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1\n  ],\n  \"e\": {}\n}");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }}{{ {'k': 'v'} | items | list }}"),
            "a+b+c[['k', 'v']]");
}

TEST(JinjaTest, MethodsSlicesAndOperators) {
  EXPECT_EQ(render("{{ '<think>x</think>y'.split('</think>')[-1].lstrip('\\n') }}"), "y");
  EXPECT_EQ(
      render("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ ' a '.strip() }}"),
      "TrueTruea");
  EXPECT_EQ(render("{{ [1, 2, 3, 4][1:] }}{{ [1, 2, 3][::-1] }}{{ 'héllo'[1:3] }}{{ 'abc'[-1] }}"),
            "[2, 3, 4][3, 2, 1]élc");
  EXPECT_EQ(
      render("{{ 7 // 2 }} {{ 7 / 2 }} {{ -7 % 3 }} {{ 2 ** 3 }} {{ 1 ~ 'a' }} {{ 'ab' * 2 }}"),
      "3 3.5 2 8 1a abab");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 'k' in {'k': 1} }}{{ 3 not in [1, 2] }}{{ 1 == 1.0 }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ {'a': 1}.get('b', 'z') }}{{ none }}{{ undefined_name }}"), "zNone");
}

TEST(JinjaTest, Tests) {
  const nlohmann::json v = {{"s", "x"}, {"m", {{"k", 1}}}, {"n", nullptr}};
  EXPECT_EQ(render("{{ s is string }}{{ m is mapping }}{{ n is none }}{{ q is defined }}{{ m.k is "
                   "not none }}"
                   "{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ s is sameas 'x' }}",
                   v),
            "TrueTrueTrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'yes' if m.missing is undefined else 'no' }}", v), "yes");
}

TEST(JinjaTest, ErrorsNameTheLine) {
  auto error = [](const std::string& source) {
    try {
      render(source);
    } catch (const TemplateError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("a\n{{ raise_exception('bad roles') }}"), "chat template line 2: bad roles");
  EXPECT_EQ(error("{% if x %}"), "chat template line 1: missing {% endif %}");
  EXPECT_EQ(error("{{ 1 + 'a' }}"),
            "chat template line 1: unsupported operand types for +: 'int' and 'str'");
  EXPECT_EQ(error("\n{% while %}"), "chat template line 2: unsupported statement 'while'");
  EXPECT_EQ(error("{{ x | nosuch }}"), "chat template line 1: unknown filter 'nosuch'");
}

}  // namespace
}  // namespace streamrl::tokenizer::jinja
