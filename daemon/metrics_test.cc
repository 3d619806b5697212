#include "daemon/metrics.h"

#include <string>

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
