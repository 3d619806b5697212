#include "daemon/metrics.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ckptscan::daemon {
namespace {

TEST(MetricsTest, TextHasEveryFamilyWithZerosBeforeAnyJob) {
  JobSlots slots(2, 8);
  Metrics m(&slots);
  const std::string text = m.Text();
  for (const char* family :
       {"ckptscand_jobs_total{verdict=\"DANGEROUS\"} 0",
        "ckptscand_worker_exits_total{reason=\"violation\"} 0", "ckptscand_jobs_queued 0",
        "ckptscand_jobs_running 0", "ckptscand_jobs_refused_total 0",
        "ckptscand_bytes_scanned_total 0", "# HELP ckptscand_worker_exits_total"}) {
    EXPECT_NE(text.find(family), std::string::npos) << family << "\n" << text;
  }
}

TEST(MetricsTest, BuildAndRulesInfoFollowReloads) {
  JobSlots slots(1, 1);
  Metrics m(&slots);
  m.BuildInfo("9.8.7");
  m.RulesInForce("rules-1", /*reload=*/false);
  std::string text = m.Text();
  EXPECT_NE(text.find("ckptscand_build_info{version=\"9.8.7\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ckptscand_rules_info{version=\"rules-1\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"ok\"} 0"), std::string::npos);
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"failed\"} 0"), std::string::npos);

  // A reload replaces the one rules series; a failed one leaves it and is counted.
  m.RulesInForce("rules-2", /*reload=*/true);
  m.RulesReloadFailed();
  m.RulesInForce("rules-2", /*reload=*/true);  // the same file again: one series still
  text = m.Text();
  EXPECT_EQ(text.find("version=\"rules-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("ckptscand_rules_info{version=\"rules-2\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"ok\"} 2"), std::string::npos);
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"failed\"} 1"), std::string::npos);
}

// Reloads from SIGHUP and Admin calls at once, scraped meanwhile: one rules series in the end,
// every reload counted.
TEST(MetricsTest, ConcurrentReloadsAndScrapesKeepOneRulesSeries) {
  JobSlots slots(1, 1);
  Metrics m(&slots);
  m.RulesInForce("v0", /*reload=*/false);
  constexpr int kPerThread = 200;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) EXPECT_NE(m.Text().find("ckptscand_rules_info"), std::string::npos);
  });
  std::vector<std::thread> reloaders;
  for (int t = 0; t < 3; ++t) {
    reloaders.emplace_back([&m, t] {
      for (int i = 0; i < kPerThread; ++i) {
        m.RulesInForce(absl::StrCat("v", t, ".", i % 7), /*reload=*/true);
        m.RulesReloadFailed();
      }
    });
  }
  for (std::thread& r : reloaders) r.join();
  done = true;
  scraper.join();
  const std::string text = m.Text();
  size_t series = 0;
  for (size_t at = text.find("ckptscand_rules_info{"); at != std::string::npos;
       at = text.find("ckptscand_rules_info{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 1u) << text;
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"ok\"} 600"), std::string::npos);
  EXPECT_NE(text.find("ckptscand_rules_reloads_total{result=\"failed\"} 600"),
            std::string::npos);
}

TEST(MetricsTest, CountsWhatHappened) {
  JobSlots slots(1, 1);
  Metrics m(&slots);
  absl::StatusOr<JobSlots::Ticket> running = slots.Admit("uid:1");
  ASSERT_TRUE(running.ok() && running->Run(nullptr).ok());
  absl::StatusOr<JobSlots::Ticket> queued = slots.Admit("uid:1");
  ASSERT_TRUE(queued.ok());
  EXPECT_FALSE(slots.Admit("uid:1").ok());  // refused
  m.Request("ScanUpload", 0, absl::Milliseconds(3));
  m.Request("ScanUpload", 8, absl::Milliseconds(1));  // RESOURCE_EXHAUSTED
  m.Request("ScanPath", 99, absl::Milliseconds(1));   // no such code: its number
  m.Job("DANGEROUS");
  sandbox::Result violation;
  violation.outcome = sandbox::Outcome::kViolation;
  m.WorkerExit(violation);
  m.Phase("parse", absl::Milliseconds(2));
  m.Scanned(1000);
  const std::string text = m.Text();
  for (const char* line :
       {"ckptscand_requests_total{code=\"OK\",rpc=\"ScanUpload\"} 1",
        "ckptscand_requests_total{code=\"RESOURCE_EXHAUSTED\",rpc=\"ScanUpload\"} 1",
        "ckptscand_requests_total{code=\"99\",rpc=\"ScanPath\"} 1",
        "ckptscand_request_duration_seconds_bucket{rpc=\"ScanUpload\",le=\"0.005\"} 2",
        "ckptscand_jobs_total{verdict=\"DANGEROUS\"} 1",
        "ckptscand_worker_exits_total{reason=\"violation\"} 1",
        "ckptscand_phase_duration_seconds_count{phase=\"parse\"} 1", "ckptscand_jobs_running 1",
        "ckptscand_jobs_queued 1", "ckptscand_jobs_refused_total 1",
        "ckptscand_bytes_scanned_total 1000"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace ckptscan::daemon
