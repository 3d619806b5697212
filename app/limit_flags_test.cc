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
  ASSERT_EQ(LimitFlags().size(), names.size() + formats::FormatLimits().size());
  std::vector<std::string> specs;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(LimitFlags()[i].name, names[i]);
    specs.push_back(names[i] + "=" + std::to_string(100 + i));
  }
  absl::StatusOr<LimitSettings> l = ParseLimitFlags(specs);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vm.max_opcodes, 100u);
  EXPECT_EQ(l->vm.max_stack_depth, 101u);
  EXPECT_EQ(l->vm.max_mark_depth, 102u);
  EXPECT_EQ(l->vm.max_memo_entries, 103u);
  EXPECT_EQ(l->vm.max_memo_index, 104u);
  EXPECT_EQ(l->vm.max_nodes, 105u);
  EXPECT_EQ(l->vm.max_expanded_values, 106u);
  EXPECT_EQ(l->vm.max_value_depth, 107u);
  EXPECT_EQ(l->vm.max_string_bytes, 108u);
  EXPECT_EQ(l->vm.max_line_bytes, 109u);
  EXPECT_EQ(l->vm.max_total_bytes, 110u);
  EXPECT_EQ(l->vm.max_kept_string, 111u);
  EXPECT_EQ(l->vm.max_pickles, 112u);
  EXPECT_EQ(l->vm.max_nested_depth, 113u);
  EXPECT_EQ(l->vm.max_nested_bytes, 114u);
}

TEST(LimitFlagsTest, LimitsInForceListEveryLimitWithItsSetValue) {
  absl::StatusOr<LimitSettings> set =
      ParseLimitFlags({"max_opcodes=7", "max_pickles=3", "max_compression_ratio=200"});
  ASSERT_TRUE(set.ok()) << set.status();
  const std::vector<LimitInForce> in_force = LimitsInForce(set->vm, set->format);
  ASSERT_EQ(in_force.size(), LimitFlags().size());
  for (size_t i = 0; i < in_force.size(); ++i) {
    const LimitFlag& flag = LimitFlags()[i];
    EXPECT_EQ(in_force[i].name, flag.name);
    const uint64_t expected = flag.name == "max_opcodes"             ? 7
                              : flag.name == "max_pickles"           ? 3
                              : flag.name == "max_compression_ratio" ? 200
                                                                     : flag.default_value;
    EXPECT_EQ(in_force[i].value, expected) << flag.name;
  }
}

TEST(LimitFlagsTest, NoFlagsGiveTheDefaults) {
  absl::StatusOr<LimitSettings> l = ParseLimitFlags({});
  ASSERT_TRUE(l.ok());
  const pickle::Limits d;
  EXPECT_EQ(l->vm.max_opcodes, d.max_opcodes);
  EXPECT_EQ(l->vm.max_nested_depth, d.max_nested_depth);
  for (const LimitFlag& f : LimitFlags()) EXPECT_GT(f.default_value, 0u) << f.name;
}

TEST(LimitFlagsTest, BinarySuffixesMultiplyAndLaterFlagWins) {
  absl::StatusOr<LimitSettings> l =
      ParseLimitFlags({"max_total_bytes=2T", "max_kept_string=1K", "max_string_bytes=4G",
                       "max_nested_bytes=3M", "max_opcodes=5", "max_opcodes=0"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vm.max_total_bytes, 2ull << 40);
  EXPECT_EQ(l->vm.max_kept_string, 1024u);
  EXPECT_EQ(l->vm.max_string_bytes, 4ull << 30);
  EXPECT_EQ(l->vm.max_nested_bytes, 3ull << 20);
  EXPECT_EQ(l->vm.max_opcodes, 0u);
}

TEST(LimitFlagsTest, UnknownNameIsAnErrorListingTheKnownOnes) {
  absl::StatusOr<LimitSettings> l = ParseLimitFlags({"max_opcode=5"});
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
  absl::StatusOr<LimitSettings> l = ParseLimitFlags({"max_pickles=4294967296"});
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

TEST(LimitFlagsTest, NamesAreUniqueAcrossTheVmAndTheFormats) {
  std::set<std::string_view> names;
  for (const LimitFlag& f : LimitFlags()) EXPECT_TRUE(names.insert(f.name).second) << f.name;
}

TEST(LimitFlagsTest, FormatLimitIsCarriedByIdentity) {
  absl::StatusOr<LimitSettings> l =
      ParseLimitFlags({"max_compression_ratio=1K", "max_opcodes=7", "max_container_depth=0"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->vm.max_opcodes, 7u);
  const formats::FormatLimitSettings want = {{formats::FormatLimit::kMaxCompressionRatio, 1024},
                                             {formats::FormatLimit::kMaxContainerDepth, 0}};
  EXPECT_EQ(l->format, want);
}

TEST(LimitFlagsTest, LaterFormatLimitWinsInPlace) {
  absl::StatusOr<LimitSettings> l =
      ParseLimitFlags({"max_gguf_tensors=5", "max_kv=6", "max_gguf_tensors=8"});
  ASSERT_TRUE(l.ok()) << l.status();
  const formats::FormatLimitSettings want = {{formats::FormatLimit::kMaxGgufTensors, 8},
                                             {formats::FormatLimit::kMaxKv, 6}};
  EXPECT_EQ(l->format, want);
}

TEST(LimitFlagsTest, FormatLimitOverItsMaximumIsUsageError) {
  EXPECT_TRUE(ParseLimitFlags({"max_container_depth=4294967295"}).ok());
  EXPECT_EQ(ParseLimitFlags({"max_container_depth=4G"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLimitFlags({"max_code_files=10001"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLimitFlags({"max_compression_ratio=1x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LimitFlagsTest, UnknownNameListsFormatLimitsToo) {
  absl::StatusOr<LimitSettings> l = ParseLimitFlags({"max_compresion_ratio=5"});
  ASSERT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("unknown limit"));
  EXPECT_THAT(l.status().message(), HasSubstr("max_compression_ratio"));
  EXPECT_THAT(l.status().message(), HasSubstr("max_opcodes"));
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
