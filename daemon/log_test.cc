#include "daemon/log.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"

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

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(LogLimiterTest, ACallerPastItsBurstIsLeftOutAndReportedWithTheCount) {
  LogLimiter limiter({.lines_per_second = 10, .burst = 5});
  int admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += limiter.Admit("uid:65514", kT0) ? 1 : 0;
  EXPECT_EQ(admitted, 5);
  EXPECT_EQ(limiter.Report(kT0), "") << "not due before report_every has passed";
  const std::string report = limiter.Report(kT0 + absl::Seconds(1));
  const nlohmann::json j = nlohmann::json::parse(report);
  EXPECT_EQ(j["event"], "log_suppressed");
  EXPECT_EQ(j["caller"], "uid:65514");
  EXPECT_EQ(j["suppressed"], 95);
  EXPECT_EQ(limiter.Report(kT0 + absl::Seconds(2)), "") << "reported once";
}

TEST(LogLimiterTest, OneCallersFloodLeavesAnotherCallersLinesAlone) {
  LogLimiter limiter({.lines_per_second = 1, .burst = 2});
  for (int i = 0; i < 1000; ++i) (void)limiter.Admit("uid:65514", kT0);
  EXPECT_TRUE(limiter.Admit("uid:0", kT0));
  EXPECT_TRUE(limiter.Admit("uid:0", kT0));
}

TEST(LogLimiterTest, TheBucketRefillsAtTheRate) {
  LogLimiter limiter({.lines_per_second = 10, .burst = 1});
  EXPECT_TRUE(limiter.Admit("c", kT0));
  EXPECT_FALSE(limiter.Admit("c", kT0 + absl::Milliseconds(50)));
  EXPECT_TRUE(limiter.Admit("c", kT0 + absl::Milliseconds(150)));
}

TEST(LogLimiterTest, ManyCallersAreForgottenOrShareOneBucketBeyondTheCap) {
  LogLimiter limiter({.lines_per_second = 1, .burst = 1, .max_callers = 8});
  for (int i = 0; i < 1000; ++i) (void)limiter.Admit(std::to_string(i), kT0);
  EXPECT_LE(limiter.callers(), 9u);  // the cap and the shared bucket
  // Once their buckets have refilled (and nothing of theirs is left to report) they are
  // forgotten for new ones.
  (void)limiter.Report(kT0 + absl::Seconds(5));
  EXPECT_TRUE(limiter.Admit("new", kT0 + absl::Seconds(5)));
}

TEST(LogLimiterTest, ItsThreadReportsWithoutAnotherLine) {
  LogLimiter limiter({.lines_per_second = 1, .burst = 1,
                      .report_every = absl::Milliseconds(20)});
  for (int i = 0; i < 10; ++i) (void)limiter.Admit("c");
  EXPECT_EQ(limiter.pending(), 1u);
  // The thread reports within a few periods (a loaded machine: up to 10 s).
  for (int i = 0; i < 1000 && limiter.pending() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(limiter.pending(), 0u);
  EXPECT_EQ(limiter.Report(absl::InfiniteFuture()), "");
}

TEST(LogLimiterTest, ConcurrentCallersAreCountedExactly) {
  LogLimiter limiter({.lines_per_second = 0, .burst = 10});
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) admitted += limiter.Admit("c", kT0) ? 1 : 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 10);
  const nlohmann::json j = nlohmann::json::parse(limiter.Report(absl::InfiniteFuture()));
  EXPECT_EQ(j["suppressed"], 3990);
}

}  // namespace
}  // namespace ckptscan::daemon
