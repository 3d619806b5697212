#include "app/attest.h"

#include <sys/stat.h>

#include <string>
#include <vector>

#include "app/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

using signing::AttestedVerdict;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kDigestA(64, 'a');
const std::string kDigestB(64, 'b');
const std::string kDigestC(64, 'c');

std::string MakeDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(SubjectNameTest, FolderArgumentNamesFilesBeneathIt) {
  const std::string dir = MakeDir("attest_folder");
  EXPECT_EQ(SubjectName(dir + "/sub/model.pt", {dir}), "sub/model.pt");
  EXPECT_EQ(SubjectName(dir + "/sub/model.pt", {dir + "/"}), "sub/model.pt");
}

TEST(SubjectNameTest, FileArgumentAndItsShardsAreNamedInTheirDirectory) {
  const std::string dir = MakeDir("attest_file");
  const std::string index = dir + "/model.bin.index.json";
  EXPECT_EQ(SubjectName(index, {index}), "model.bin.index.json");
  EXPECT_EQ(SubjectName(dir + "/model-00001.bin", {index}), "model-00001.bin");
  EXPECT_EQ(SubjectName("model.pt", {"model.pt"}), "model.pt");
}

TEST(SubjectNameTest, InnerFolderArgumentWins) {
  const std::string outer = MakeDir("attest_outer");
  const std::string inner = MakeDir("attest_outer/inner");
  EXPECT_EQ(SubjectName(inner + "/a.pt", {outer, inner}), "a.pt");
}

TEST(SubjectNameTest, PathUnderNoRootKeepsItsText) {
  EXPECT_EQ(SubjectName("/elsewhere/a.pt", {MakeDir("attest_none")}), "/elsewhere/a.pt");
}

v1::FileReport File(const std::string& path, const std::string& sha256, v1::Verdict verdict) {
  v1::FileReport f;
  f.set_path(path);
  f.set_sha256(sha256);
  f.set_verdict(verdict);
  f.set_format("pickle");
  f.set_kind(verdict == v1::VERDICT_ERROR ? "" : "model");
  return f;
}

AttestContext Context() {
  AttestContext c;
  c.scan_paths = {"m"};
  c.rules_sha256 = std::string(64, 'd');
  c.limits = {{"max_opcodes", 5}};
  c.time = absl::FromUnixSeconds(1797000000);
  return c;
}

TEST(AttestationOfTest, ErrorFileIsRecordedIncompleteWithItsErrors) {
  const std::string m = MakeDir("attest_of");
  AttestContext context = Context();
  context.scan_paths = {m};
  v1::Report report = NewReport("0.1.0", "2026.12.3");
  *report.add_files() = File(m + "/a.pkl", kDigestA, v1::VERDICT_SAFE);
  v1::FileReport broken = File(m + "/b.pkl", kDigestB, v1::VERDICT_ERROR);
  AddError(&broken, v1::ERROR_CODE_LIMIT, "too many opcodes");
  broken.mutable_errors(0)->set_limit_name("max_opcodes");
  *report.add_files() = broken;
  v1::FileReport odd = File(m + "/c.pkl", kDigestC, v1::VERDICT_SUSPICIOUS);
  odd.add_findings()->set_rule_id("z.rule");
  odd.add_findings()->set_rule_id("a.rule");
  odd.add_findings()->set_rule_id("z.rule");
  *report.add_files() = odd;
  absl::StatusOr<signing::ScanAttestation> a = AttestationOf(report, context);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->time_created, "2026-12-11T14:40:00Z");
  ASSERT_EQ(a->files.size(), 3u);
  EXPECT_EQ(a->files[0].name, "a.pkl");
  EXPECT_TRUE(a->files[0].complete);
  EXPECT_EQ(a->files[1].verdict, AttestedVerdict::kError);
  EXPECT_FALSE(a->files[1].complete);
  EXPECT_THAT(a->files[1].errors, ElementsAre("limit:max_opcodes"));
  EXPECT_THAT(a->files[2].rule_ids, ElementsAre("a.rule", "z.rule"));
  EXPECT_TRUE(signing::WriteAttestation(*a).ok());
}

TEST(AttestationOfTest, FileWithoutDigestIsRefused) {
  v1::Report report = NewReport("0.1.0", "2026.12.3");
  *report.add_files() = File("m/a.pkl", "", v1::VERDICT_SAFE);
  EXPECT_THAT(AttestationOf(report, Context()).status().message(),
              HasSubstr("no SHA-256 was computed"));
}

TEST(AttestationOfTest, TwoFilesUnderOneNameAreRefused) {
  v1::Report report = NewReport("0.1.0", "2026.12.3");
  *report.add_files() = File("x/a.pkl", kDigestA, v1::VERDICT_SAFE);
  *report.add_files() = File("y/a.pkl", kDigestB, v1::VERDICT_SAFE);
  AttestContext c = Context();
  c.scan_paths = {"x/a.pkl", "y/a.pkl"};
  EXPECT_THAT(AttestationOf(report, c).status().message(),
              HasSubstr("would both be attested as a.pkl"));
}

TEST(AttestationOfTest, EmptyReportIsRefused) {
  EXPECT_TRUE(absl::IsFailedPrecondition(
      AttestationOf(NewReport("0.1.0", "2026.12.3"), Context()).status()));
}

TEST(RulesVersionTest, ComparesNumbersNotText) {
  auto v = [](std::string_view s) { return *ParseRulesVersion(s); };
  EXPECT_LT(CompareRulesVersions(v("2026.9.1"), v("2026.12.0")), 0);
  EXPECT_EQ(CompareRulesVersions(v("2026.12"), v("2026.12.0")), 0);
  EXPECT_GT(CompareRulesVersions(v("2026.12.10"), v("2026.12.9")), 0);
  EXPECT_EQ(CompareRulesVersions(v("2026.12.3+overlay-sha256-abc"), v("2026.12.3")), 0);
}

TEST(RulesVersionTest, NonNumericVersionsAreRefused) {
  for (std::string_view bad : {"", "2026..1", "v2026.1", "2026.1-rc1", "INVALID-2026.1", "1.-2",
                               "1.2.3.4.5.6.7.8.9", "1234567890123456789"}) {
    EXPECT_FALSE(ParseRulesVersion(bad).ok()) << bad;
  }
}

signing::ScanAttestation Attested() {
  signing::ScanAttestation a;
  a.scanner_version = "0.1.0";
  a.rules_version = "2026.12.3";
  signing::AttestedFile safe;
  safe.name = "a.pt";
  safe.sha256 = kDigestA;
  safe.verdict = AttestedVerdict::kSafe;
  signing::AttestedFile odd;
  odd.name = "b.pkl";
  odd.sha256 = kDigestB;
  odd.verdict = AttestedVerdict::kSuspicious;
  odd.rule_ids = {"pickle.unknown_global"};
  signing::AttestedFile broken;
  broken.name = "c.bin";
  broken.sha256 = kDigestC;
  broken.verdict = AttestedVerdict::kError;
  broken.errors = {"malformed"};
  a.files = {safe, odd, broken};
  return a;
}

TEST(AttestationPolicyTest, SafeFilePasses) {
  PolicyOutcome o = CheckAttestationPolicy(Attested(), {{"local/a.pt", kDigestA}}, {});
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_THAT(o.passed, ElementsAre("local/a.pt: SAFE as a.pt"));
  EXPECT_TRUE(o.problems.empty());
}

TEST(AttestationPolicyTest, FileNotAmongSubjectsCannotBeVerified) {
  PolicyOutcome o = CheckAttestationPolicy(Attested(), {{"x.pt", std::string(64, 'e')}}, {});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.problems, ElementsAre(HasSubstr("x.pt: its SHA-256 eeee")));
}

TEST(AttestationPolicyTest, SuspiciousFailsRequireSafeWithItsRules) {
  PolicyOutcome o = CheckAttestationPolicy(Attested(), {{"b.pkl", kDigestB}}, {});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.problems,
              ElementsAre("b.pkl: recorded as SUSPICIOUS (rules pickle.unknown_global) as "
                          "b.pkl; the policy requires SAFE"));
}

TEST(AttestationPolicyTest, SuspiciousPassesRequireSuspicious) {
  AttestationPolicy p;
  p.require = AttestedVerdict::kSuspicious;
  EXPECT_EQ(CheckAttestationPolicy(Attested(), {{"b.pkl", kDigestB}}, p).exit_code, 0);
}

TEST(AttestationPolicyTest, ErrorFileIsNotVerifiedUnderAnyPolicy) {
  AttestationPolicy p;
  p.require = AttestedVerdict::kSuspicious;
  PolicyOutcome o = CheckAttestationPolicy(Attested(), {{"c.bin", kDigestC}}, p);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.problems, ElementsAre(HasSubstr("recorded as ERROR (errors malformed)")));
}

TEST(AttestationPolicyTest, FindingsWinOverErrorsAsForScan) {
  PolicyOutcome o =
      CheckAttestationPolicy(Attested(), {{"c.bin", kDigestC}, {"b.pkl", kDigestB}}, {});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.problems.size(), 2u);
}

TEST(AttestationPolicyTest, SameBytesUnderTwoNamesTakeTheWorseVerdict) {
  signing::ScanAttestation a = Attested();
  a.files[1].sha256 = kDigestA;  // b.pkl has a.pt's bytes but was judged SUSPICIOUS
  EXPECT_EQ(CheckAttestationPolicy(a, {{"a.pt", kDigestA}}, {}).exit_code, 1);
}

TEST(AttestationPolicyTest, OlderRulesFailMinRulesVersion) {
  AttestationPolicy p;
  p.min_rules_version = "2026.12.4";
  PolicyOutcome o = CheckAttestationPolicy(Attested(), {{"a.pt", kDigestA}}, p);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.problems, ElementsAre(HasSubstr("older than --min-rules-version 2026.12.4")));
  p.min_rules_version = "2026.12.3";
  EXPECT_EQ(CheckAttestationPolicy(Attested(), {{"a.pt", kDigestA}}, p).exit_code, 0);
}

TEST(AttestationPolicyTest, UncomparableRecordedRulesVersionFailsMinRulesVersion) {
  signing::ScanAttestation a = Attested();
  a.rules_version = "site-rules-7";
  AttestationPolicy p;
  p.min_rules_version = "2026.1";
  PolicyOutcome o = CheckAttestationPolicy(a, {{"a.pt", kDigestA}}, p);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.problems, ElementsAre(HasSubstr("cannot be compared")));
}

}  // namespace
}  // namespace ckptscan::app
