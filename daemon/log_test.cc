#include "daemon/log.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ckptscan::daemon {
namespace {

TEST(LogLineTest, OneParseableJsonObjectPerLine) {
  const std::string line = LogLine("job").Str("rpc", "ScanUpload").Int("size", 42).Num("ms", 1.5)
                               .Bool("ok", true).Emit();
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "job");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["rpc"], "ScanUpload");
  EXPECT_EQ(j["size"], 42);
  EXPECT_DOUBLE_EQ(j["ms"].get<double>(), 1.5);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["time"].get<std::string>().size(), 24u);  // 2026-11-29T23:59:59.123Z
}

TEST(LogLineTest, AttackerStringsCannotForgeLinesOrFloodTheLog) {
  // A file name with a newline and a forged record, invalid UTF-8 and a bidi override.
  const std::string evil = "x\n{\"event\":\"forged\"}\xff\xfe\u202e" + std::string(5000, 'A');
  const std::string line = LogLine("job").Str("name", evil).Emit();
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "the name broke the line";
  const nlohmann::json j = nlohmann::json::parse(line);  // valid UTF-8, valid JSON
  const std::string name = j["name"];
  EXPECT_LE(name.size(), kMaxLogString + 3);
  EXPECT_EQ(name.substr(0, 3), "x\\n");
  EXPECT_NE(name.find("\\xff"), std::string::npos) << name.substr(0, 60);
  EXPECT_EQ(name.find("\u202e"), std::string::npos);
  EXPECT_EQ(name.substr(name.size() - 3), "...");
}

TEST(TraceIdOfTest, TakesTheTraceIdOfAWellFormedTraceparentOnly) {
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf(""), "");
  EXPECT_EQ(TraceIdOf("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");  // upper
  EXPECT_EQ(TraceIdOf("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");  // version
  EXPECT_EQ(TraceIdOf("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");  // zero
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n"), "");
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e47\n6-00f067aa0ba902b7-01"), "");
}

}  // namespace
}  // namespace ckptscan::daemon
