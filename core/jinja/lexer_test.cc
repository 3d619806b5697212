#include "core/jinja/lexer.h"

#include <string>

#include "gtest/gtest.h"

namespace ckptscan::jinja {
namespace {

TEST(JinjaLexerTest, StringLiteralsAreDecodedAsPythonDecodesThem) {
  const absl::StatusOr<Lexed> l = Lex("{{ '\\x5f\\x5fclass\\u005f\\137' }}", {});
  ASSERT_TRUE(l.ok());
  ASSERT_FALSE(l->problem.has_value());
  bool found = false;
  for (const Token& t : l->tokens) found |= t.text == "__class__";
  EXPECT_TRUE(found);
}

TEST(JinjaLexerTest, DelimitersInsideStringsDoNotCloseTheBlock) {
  const absl::StatusOr<Lexed> l = Lex("{{ '}}' ~ \"%}\" }}", {});
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->problem.has_value());
}

TEST(JinjaLexerTest, UnclosedStringIsAProblemNotAnError) {
  const absl::StatusOr<Lexed> l = Lex("{{ 'open }}", {});
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->problem.has_value());
}

TEST(JinjaLexerTest, TemplateOverTheByteLimitIsResourceExhausted) {
  Limits limits;
  limits.max_template_bytes = 16;
  const absl::StatusOr<Lexed> l = Lex(std::string(17, 'a'), limits);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaLexerTest, TokenCountIsLimited) {
  Limits limits;
  limits.max_tokens = 10;
  const absl::StatusOr<Lexed> l = Lex("{{ a ~ b ~ c ~ d ~ e ~ f ~ g ~ h }}", limits);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace ckptscan::jinja
