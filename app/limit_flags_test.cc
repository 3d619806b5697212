#include "app/limit_flags.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

using ::testing::HasSubstr;

TEST(LimitFlagsTest, EveryLimitsFieldIsSettableByName) {
  const std::vector<std::string> names = {
      "max_opcodes",      "max_stack_depth",  "max_mark_depth",      "max_memo_entries",
      "max_memo_index",   "max_nodes",        "max_expanded_values", "max_value_depth",
      "max_string_bytes", "max_line_bytes",   "max_total_bytes",     "max_kept_string",
      "max_pickles",      "max_nested_depth", "max_nested_bytes"};
  ASSERT_EQ(LimitFlags().size(), names.size());
  std::vector<std::string> specs;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(LimitFlags()[i].name, names[i]);
    specs.push_back(names[i] + "=" + std::to_string(100 + i));
  }
  absl::StatusOr<pickle::Limits> l = ParseLimitFlags(specs);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->max_opcodes, 100u);
  EXPECT_EQ(l->max_stack_depth, 101u);
  EXPECT_EQ(l->max_mark_depth, 102u);
  EXPECT_EQ(l->max_memo_entries, 103u);
  EXPECT_EQ(l->max_memo_index, 104u);
  EXPECT_EQ(l->max_nodes, 105u);
  EXPECT_EQ(l->max_expanded_values, 106u);
  EXPECT_EQ(l->max_value_depth, 107u);
  EXPECT_EQ(l->max_string_bytes, 108u);
  EXPECT_EQ(l->max_line_bytes, 109u);
  EXPECT_EQ(l->max_total_bytes, 110u);
  EXPECT_EQ(l->max_kept_string, 111u);
  EXPECT_EQ(l->max_pickles, 112u);
  EXPECT_EQ(l->max_nested_depth, 113u);
  EXPECT_EQ(l->max_nested_bytes, 114u);
}

TEST(LimitFlagsTest, NoFlagsGiveTheDefaults) {
  absl::StatusOr<pickle::Limits> l = ParseLimitFlags({});
  ASSERT_TRUE(l.ok());
  const pickle::Limits d;
  EXPECT_EQ(l->max_opcodes, d.max_opcodes);
  EXPECT_EQ(l->max_nested_depth, d.max_nested_depth);
  for (const LimitFlag& f : LimitFlags()) EXPECT_GT(f.default_value, 0u) << f.name;
}

TEST(LimitFlagsTest, BinarySuffixesMultiplyAndLaterFlagWins) {
  absl::StatusOr<pickle::Limits> l =
      ParseLimitFlags({"max_total_bytes=2T", "max_kept_string=1K", "max_string_bytes=4G",
                       "max_nested_bytes=3M", "max_opcodes=5", "max_opcodes=0"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->max_total_bytes, 2ull << 40);
  EXPECT_EQ(l->max_kept_string, 1024u);
  EXPECT_EQ(l->max_string_bytes, 4ull << 30);
  EXPECT_EQ(l->max_nested_bytes, 3ull << 20);
  EXPECT_EQ(l->max_opcodes, 0u);
}

TEST(LimitFlagsTest, UnknownNameIsAnErrorListingTheKnownOnes) {
  absl::StatusOr<pickle::Limits> l = ParseLimitFlags({"max_opcode=5"});
  ASSERT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("unknown limit"));
  EXPECT_THAT(l.status().message(), HasSubstr("max_nested_bytes"));
}

TEST(LimitFlagsTest, MalformedValuesAreErrors) {
  for (const char* spec : {"max_opcodes", "max_opcodes=", "max_opcodes=-1", "max_opcodes=+1",
                           "max_opcodes= 1", "max_opcodes=1.5", "max_opcodes=0x10",
                           "max_opcodes=1k", "max_opcodes=K", "max_opcodes=1KB", "=5", ""}) {
    EXPECT_EQ(ParseLimitFlags({spec}).status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

TEST(LimitFlagsTest, OverflowingValuesAreErrors) {
  EXPECT_TRUE(ParseLimitFlags({"max_opcodes=18446744073709551615"}).ok());
  EXPECT_FALSE(ParseLimitFlags({"max_opcodes=18446744073709551616"}).ok());
  EXPECT_FALSE(ParseLimitFlags({"max_opcodes=99999999999999999999999"}).ok());
  EXPECT_FALSE(ParseLimitFlags({"max_opcodes=16777216T"}).ok());  // 2^24 * 2^40
  EXPECT_TRUE(ParseLimitFlags({"max_pickles=4294967295"}).ok());
  absl::StatusOr<pickle::Limits> l = ParseLimitFlags({"max_pickles=4294967296"});
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(l.status().message(), HasSubstr("at most 4294967295"));
  EXPECT_FALSE(ParseLimitFlags({"max_nested_depth=4G"}).ok());
}

TEST(LimitFlagsTest, HelpListsEveryLimitWithItsDefault) {
  const std::string help = LimitFlagsHelp();
  for (const LimitFlag& f : LimitFlags()) {
    EXPECT_THAT(help, HasSubstr(std::string(f.name))) << f.name;
    EXPECT_THAT(help, HasSubstr(std::to_string(f.default_value))) << f.name;
  }
}

TEST(ParseSizeValueTest, AcceptsLimitSyntaxAndRejectsTheRest) {
  EXPECT_EQ(*ParseSizeValue("8G"), uint64_t{8} << 30);
  EXPECT_EQ(*ParseSizeValue("4096"), 4096u);
  EXPECT_FALSE(ParseSizeValue("8g").ok());
  EXPECT_FALSE(ParseSizeValue("-1").ok());
  EXPECT_FALSE(ParseSizeValue("99999999999999999999").ok());
  EXPECT_FALSE(ParseSizeValue("").ok());
}

}  // namespace
}  // namespace ckptscan::app
