#include "app/verdict.h"

#include <initializer_list>

#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

TEST(ExitCodeTest, SafeIsZeroFindingsAreOneErrorIsTwo) {
  EXPECT_EQ(ExitCodeFor(v1::VERDICT_SAFE), 0);
  EXPECT_EQ(ExitCodeFor(v1::VERDICT_SUSPICIOUS), 1);
  EXPECT_EQ(ExitCodeFor(v1::VERDICT_DANGEROUS), 1);
  EXPECT_EQ(ExitCodeFor(v1::VERDICT_ERROR), 2);
  EXPECT_EQ(kExitUsage, 64);
}

TEST(ExitCodeTest, UnspecifiedOrUnknownVerdictIsNeverSafe) {
  EXPECT_EQ(ExitCodeFor(v1::VERDICT_UNSPECIFIED), 2);
  EXPECT_EQ(ExitCodeFor(static_cast<v1::Verdict>(99)), 2);
}

v1::Report ReportOf(std::initializer_list<v1::Verdict> verdicts) {
  v1::Report r;
  for (v1::Verdict v : verdicts) r.add_files()->set_verdict(v);
  return r;
}

TEST(FailOnTest, SuspiciousOnlyPassesWithFailOnDangerous) {
  const v1::Report r = ReportOf({v1::VERDICT_SAFE, v1::VERDICT_SUSPICIOUS});
  EXPECT_EQ(ExitCodeFor(r, FailOn::kSuspicious), 1);
  EXPECT_EQ(ExitCodeFor(r, FailOn::kDangerous), 0);
}

TEST(FailOnTest, ErrorBesideSuspiciousStillExitsTwoWithFailOnDangerous) {
  const v1::Report r = ReportOf({v1::VERDICT_SUSPICIOUS, v1::VERDICT_ERROR});
  EXPECT_EQ(ExitCodeFor(r, FailOn::kSuspicious), 1);  // findings win over errors
  EXPECT_EQ(ExitCodeFor(r, FailOn::kDangerous), 2);
}

TEST(FailOnTest, SuspiciousFileWithAnErrorIsNeverAPass) {
  // A suspicious global, then a parse error: the rest of the stream was never judged.
  v1::Report r = ReportOf({v1::VERDICT_SUSPICIOUS});
  r.mutable_files(0)->add_errors()->set_code("malformed");
  EXPECT_EQ(ExitCodeFor(r, FailOn::kSuspicious), 1);
  EXPECT_EQ(ExitCodeFor(r, FailOn::kDangerous), 2);
  // Without the error it passes under --fail-on dangerous, as documented.
  r.mutable_files(0)->clear_errors();
  EXPECT_EQ(ExitCodeFor(r, FailOn::kDangerous), 0);
}

TEST(FailOnTest, DangerousFailsWhateverTheThreshold) {
  const v1::Report r = ReportOf({v1::VERDICT_ERROR, v1::VERDICT_DANGEROUS});
  EXPECT_EQ(ExitCodeFor(r, FailOn::kSuspicious), 1);
  EXPECT_EQ(ExitCodeFor(r, FailOn::kDangerous), 1);
}

TEST(FailOnTest, NoFilesOrUnspecifiedIsNeverZero) {
  EXPECT_EQ(ExitCodeFor(ReportOf({}), FailOn::kDangerous), 2);
  EXPECT_EQ(ExitCodeFor(ReportOf({v1::VERDICT_UNSPECIFIED}), FailOn::kDangerous), 2);
  EXPECT_EQ(ExitCodeFor(ReportOf({v1::VERDICT_SAFE}), FailOn::kDangerous), 0);
}

TEST(VerdictNameTest, ShortNames) {
  EXPECT_EQ(VerdictName(v1::VERDICT_SAFE), "SAFE");
  EXPECT_EQ(VerdictName(v1::VERDICT_SUSPICIOUS), "SUSPICIOUS");
  EXPECT_EQ(VerdictName(v1::VERDICT_DANGEROUS), "DANGEROUS");
  EXPECT_EQ(VerdictName(v1::VERDICT_ERROR), "ERROR");
  EXPECT_EQ(VerdictName(v1::VERDICT_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_EQ(SeverityName(v1::SEVERITY_INFO), "INFO");
  EXPECT_EQ(SeverityName(v1::SEVERITY_LOW), "LOW");
  EXPECT_EQ(SeverityName(v1::SEVERITY_MEDIUM), "MEDIUM");
  EXPECT_EQ(SeverityName(v1::SEVERITY_HIGH), "HIGH");
  EXPECT_EQ(SeverityName(v1::SEVERITY_CRITICAL), "CRITICAL");
}

}  // namespace
}  // namespace ckptscan::app
