#include "app/verdict.h"

#include <initializer_list>
#include <iterator>
#include <optional>
#include <utility>

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

// The names docs/report.md documents and users' scripts match, each one both ways.
TEST(ErrorCodeNameTest, EveryCodeKeepsItsDocumentedSpelling) {
  const std::pair<v1::ErrorCode, const char*> names[] = {
      {v1::ERROR_CODE_MALFORMED, "malformed"},
      {v1::ERROR_CODE_UNSUPPORTED, "unsupported"},
      {v1::ERROR_CODE_LIMIT, "limit"},
      {v1::ERROR_CODE_IO, "io"},
      {v1::ERROR_CODE_INTERNAL, "internal"},
      {v1::ERROR_CODE_TIMEOUT, "timeout"},
      {v1::ERROR_CODE_SANDBOX, "sandbox"},
      {v1::ERROR_CODE_CANCELLED, "cancelled"},
      {v1::ERROR_CODE_MISSING_SHARD, "missing_shard"},
      {v1::ERROR_CODE_DIGEST_MISMATCH, "digest_mismatch"},
      {v1::ERROR_CODE_SERVER, "server"},
      {v1::ERROR_CODE_NOT_PRESENT, "not_present"},
  };
  ASSERT_EQ(std::size(names), static_cast<size_t>(v1::ErrorCode_MAX));  // every code listed
  for (const auto& [code, name] : names) {
    EXPECT_EQ(ErrorCodeName(code), name);
    EXPECT_EQ(ParseErrorCode(name), code) << name;
  }
  EXPECT_EQ(ErrorCodeName(v1::ERROR_CODE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(ErrorCodeName(static_cast<v1::ErrorCode>(99)), "unspecified");
  for (const char* bad : {"unspecified", "LIMIT", "Limit", "", "limit ", "error_code_limit"}) {
    EXPECT_EQ(ParseErrorCode(bad), std::nullopt) << bad;
  }
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
  r.mutable_files(0)->add_errors()->set_code(v1::ERROR_CODE_MALFORMED);
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
