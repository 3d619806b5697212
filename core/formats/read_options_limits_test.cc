#include "core/formats/read_options_limits.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ckptscan::formats {
namespace {

// The table's defaults repeat the Limits structs' initializers: a changed default shows here.
TEST(ReadOptionsLimitsTest, TableDefaultsAreTheReadOptionsDefaults) {
  const ReadOptions defaults;
  for (const FormatLimitInfo& info : FormatLimits()) {
    EXPECT_EQ(GetFormatLimit(defaults, info.id), info.default_value) << info.name;
    EXPECT_LE(info.default_value, info.max_value) << info.name;
  }
}

TEST(ReadOptionsLimitsTest, NamesAreUniqueAndFound) {
  std::set<std::string> names;
  for (const FormatLimitInfo& info : FormatLimits()) {
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    ASSERT_NE(FindFormatLimit(info.name), nullptr) << info.name;
    EXPECT_EQ(FindFormatLimit(info.name)->id, info.id);
  }
  EXPECT_EQ(FindFormatLimit("max_opcodes"), nullptr);  // a pickle::Limits field
}

// Every limit reaches its own field and no other: set one to its maximum, read all back.
TEST(ReadOptionsLimitsTest, EachSetReachesItsFieldOnly) {
  for (const FormatLimitInfo& info : FormatLimits()) {
    ReadOptions options;
    const uint64_t value = info.max_value == info.default_value ? 0 : info.max_value;
    ASSERT_TRUE(SetFormatLimit(info.id, value, &options).ok()) << info.name;
    for (const FormatLimitInfo& other : FormatLimits()) {
      EXPECT_EQ(GetFormatLimit(options, other.id), other.id == info.id ? value : other.default_value)
          << "set " << info.name << ", read " << other.name;
    }
  }
}

TEST(ReadOptionsLimitsTest, TemplateBytesSetsTheReadersToo) {
  ReadOptions options;
  ASSERT_TRUE(SetFormatLimit("max_template_bytes", 100, &options).ok());
  EXPECT_EQ(options.templates.max_template_bytes, 100u);
  EXPECT_EQ(options.templates.reader.max_template_bytes, 100u);
}

TEST(ReadOptionsLimitsTest, OverTheMaximumIsRefused) {
  ReadOptions options;
  EXPECT_EQ(SetFormatLimit("max_container_depth", 1ull << 32, &options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetFormatLimit("max_code_files", 10001, &options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(options.max_container_depth, 2u);
}

TEST(ReadOptionsLimitsTest, UnknownNameIsRefused) {
  ReadOptions options;
  EXPECT_EQ(SetFormatLimit("max_bogus", 1, &options).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ckptscan::formats
