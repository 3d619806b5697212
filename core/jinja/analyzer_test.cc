#include "core/jinja/analyzer.h"

#include <string>

#include "core/jinja/parser.h"
#include "gtest/gtest.h"

namespace ckptscan::jinja {
namespace {

absl::StatusOr<Analysis> AnalyzeText(const std::string& text, const Limits& limits = {}) {
  absl::StatusOr<Parsed> p = Parse(text, limits);
  if (!p.ok()) return p.status();
  EXPECT_FALSE(p->problem.has_value()) << p->problem->message;
  return Analyze(text, p->tree, limits);
}

uint8_t DangerousEnvs(const Analysis& a) {
  uint8_t envs = 0;
  for (const Finding& f : a.findings) {
    if (f.severity == Severity::kDangerous) envs |= f.envs;
  }
  return envs;
}

TEST(JinjaAnalyzerTest, NamesAreFoldedThroughLoopsOverConstants) {
  const absl::StatusOr<Analysis> a =
      AnalyzeText("{% set ns = namespace(n='') %}{% for c in 'XXclassXX'|replace('X', '_') %}"
          "{% set ns.n = ns.n ~ c %}{% endfor %}{{ messages[ns.n] }}");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(DangerousEnvs(*a), kPlainEnv);
  EXPECT_FALSE(a->unresolved);
}

TEST(JinjaAnalyzerTest, DataAccessByConstantNamesIsSafe) {
  const absl::StatusOr<Analysis> a =
      AnalyzeText("{% for m in messages %}{{ m.role|upper ~ m['content'].strip() }}{% endfor %}");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->findings.empty());
  EXPECT_EQ(a->names, (std::vector<std::string>{"content", "role", "strip"}));
}

TEST(JinjaAnalyzerTest, AttrFormatIsDangerousForBothEnvironments) {
  const absl::StatusOr<Analysis> a = AnalyzeText("{{ ('{0}'|attr('format'))(messages) }}");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(DangerousEnvs(*a), kPlainEnv | kSandboxEnv);
}

TEST(JinjaAnalyzerTest, MacroRecursionIsBoundedByCallDepth) {
  Limits limits;
  limits.max_call_depth = 8;
  const absl::StatusOr<Analysis> a =
      AnalyzeText("{% macro m(n) %}{{ m(n ~ 'x') }}{% endmacro %}{{ m('') }}", limits);
  // Either folded to a fixpoint or stopped at the named limit: never unbounded.
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted);
  }
}

TEST(JinjaAnalyzerTest, ConstantLoopsAreSummarisedPastTheUnrollLimit) {
  const absl::StatusOr<Analysis> a = AnalyzeText("{% for i in range(100000000) %}{{ i }}{% endfor %}");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->findings.empty());
}

}  // namespace
}  // namespace ckptscan::jinja
