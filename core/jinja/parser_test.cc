#include "core/jinja/parser.h"

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::jinja {
namespace {

TEST(JinjaParserTest, ChatTemplateConstructsAreRead) {
  const absl::StatusOr<Parsed> p = Parse(
      "{%- set ns = namespace(a=1) -%}{% for m in messages if m.role != 'x' recursive %}"
      "{% macro r(x, y='a') %}{{ caller() if caller is defined }}{% endmacro %}"
      "{% call(z) r(1) %}{{ z }}{% endcall %}{% filter upper %}a{% endfilter %}"
      "{% with a = 1, b = 2 %}{{ a ~ b }}{% endwith %}{% set ns.a = loop.index0 %}"
      "{% if loop.last %}{% break %}{% elif m is string %}{% continue %}{% endif %}"
      "{% generation %}{{ m.content|trim }}{% endgeneration %}{% raw %}{{ x }}{% endraw %}"
      "{{ m['tool_calls'][0:2]|map(attribute='function')|list|tojson(indent=2) }}"
      "{% endfor %}{#- c -#}",
      {});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->problem.has_value()) << p->problem->message;
}

TEST(JinjaParserTest, UnknownFilterIsRefusedAsJinjaRefusesIt) {
  const absl::StatusOr<Parsed> p = Parse("{{ x|nosuchfilter }}", {});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->problem.has_value());
  EXPECT_FALSE(p->problem->unsupported);
}

// Jinja's tuple end rules ("in", "recursive") never match (is_tuple_end hands test_any its
// tuple as one argument, in 3.1.2 and 3.1.6): a trailing comma takes the next name as a
// target. Checked with both jinja2 releases.
TEST(JinjaParserTest, TupleEndRulesNeverMatchAsInJinja) {
  for (const char* refused : {"{% for m, in x %}{{ m }}{% endfor %}",
                              "{% for m ,in x %}{{ m }}{% endfor %}",
                              "{% for m, n, in x %}{% endfor %}"}) {
    const absl::StatusOr<Parsed> p = Parse(refused, {});
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->problem.has_value()) << refused;
  }
  for (const char* read : {"{% for (m,) in x %}{{ m }}{% endfor %}",
                           "{% for m in a, recursive %}{{ m }}{% endfor %}"}) {
    const absl::StatusOr<Parsed> p = Parse(read, {});
    ASSERT_TRUE(p.ok());
    EXPECT_FALSE(p->problem.has_value()) << read << ": " << p->problem->message;
  }
}

TEST(JinjaParserTest, UnclosedForIsRefused) {
  const absl::StatusOr<Parsed> p = Parse("{% for x in y %}{{ x }}", {});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->problem.has_value());
}

TEST(JinjaParserTest, DeepBracketsAreResourceExhaustedNotRecursion) {
  const std::string t = "{{ " + std::string(1000000, '[') + " }}";
  const absl::StatusOr<Parsed> p = Parse(t, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaParserTest, DeepNotChainsAreResourceExhaustedNotRecursion) {
  std::string t = "{{ ";
  for (int i = 0; i < 200000; ++i) t += "not ";
  t += "x }}";
  const absl::StatusOr<Parsed> p = Parse(t, {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaParserTest, NestingLimitIsConfigurable) {
  Limits limits;
  limits.max_nesting = 4;
  const absl::StatusOr<Parsed> p = Parse("{% if a %}{% if b %}{% if c %}{% if d %}{% if e %}"
                                         "{% endif %}{% endif %}{% endif %}{% endif %}{% endif %}",
                                         limits);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaParserTest, NodeCountIsLimited) {
  Limits limits;
  limits.max_nodes = 20;
  std::string t;
  for (int i = 0; i < 30; ++i) t += "{{ x }}";
  const absl::StatusOr<Parsed> p = Parse(t, limits);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace ckptscan::jinja
