#include "clients/verdict.h"

#include "gtest/gtest.h"

namespace ckptscan::clients {
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
}  // namespace ckptscan::clients
