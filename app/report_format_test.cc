#include "app/report_format.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "app/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::app {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::ordered_json;

std::vector<std::string> Keys(const Json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  return keys;
}

v1::Finding ShellFinding(uint64_t offset) {
  v1::Finding f;
  f.set_rule_id("global.denied.shell");
  f.set_severity(v1::SEVERITY_CRITICAL);
  f.set_category("shell");
  f.set_global("posix.system");
  f.set_call("posix.system('id')");
  f.mutable_location()->set_member("");
  f.mutable_location()->set_offset(offset);
  f.mutable_location()->set_opcode("REDUCE");
  f.set_message("runs a shell command");
  f.set_verdict(v1::VERDICT_DANGEROUS);
  return f;
}

v1::ScanError LimitError() {
  v1::ScanError e;
  e.set_code(v1::ERROR_CODE_LIMIT);
  e.set_message("too many opcodes");
  e.mutable_location()->set_offset(90);
  e.mutable_location()->set_opcode("MARK");
  e.set_limit_name("max_opcodes");
  e.set_limit_value(1000);
  return e;
}

// A file with a dangerous call followed by a parse error, plus a clean file.
v1::Report SampleReport() {
  v1::Report r;
  r.set_schema("ckptscan.report.v1");
  r.set_scanner_version("0.1.0");
  r.set_rules_version("2024.1");
  r.set_verdict(v1::VERDICT_DANGEROUS);
  v1::FileReport* f = r.add_files();
  f->set_path("models/evil.pkl");
  f->set_sha256(std::string(64, 'a'));
  f->set_size(123);
  f->set_format("pickle");
  f->set_verdict(v1::VERDICT_DANGEROUS);
  *f->add_findings() = ShellFinding(57);
  *f->add_errors() = LimitError();
  f->mutable_tensors()->set_count(0);
  f->mutable_tensors()->set_bytes(0);
  f->set_pickles(1);
  f->set_globals(1);
  v1::FileReport* ok = r.add_files();
  ok->set_path("models/ok.pkl");
  ok->set_sha256(std::string(64, 'b'));
  ok->set_size(10);
  ok->set_format("pickle");
  ok->set_verdict(v1::VERDICT_SAFE);
  ok->mutable_tensors();
  ok->set_pickles(1);
  return r;
}

const std::vector<rules::RuleInfo>& TestCatalogue() {
  static const std::vector<rules::RuleInfo> catalogue{
      {"global.denied.shell", "Shell command global", "Runs shell commands when loaded.",
       v1::VERDICT_DANGEROUS, v1::SEVERITY_CRITICAL},
      {"global.unknown", "Global not on the allowlist", "Review it.", v1::VERDICT_SUSPICIOUS,
       v1::SEVERITY_MEDIUM},
      {"global.never.used", "Unused", "Unused.", v1::VERDICT_DANGEROUS, v1::SEVERITY_HIGH},
  };
  return catalogue;
}

// ------------------------------------------------------------------ JSON

// A repository scan's report: a model, a data file with a SUSPICIOUS finding, an unreadable
// file without a kind, a skipped folder; FoldVerdict's summary and each rendering of it.
v1::Report RepositoryReport() {
  v1::Report r = SampleReport();
  r.mutable_files(0)->set_kind("model");
  r.mutable_files(1)->set_kind("model");
  v1::FileReport* cfg = r.add_files();
  cfg->set_path("repo/config.json");
  cfg->set_format("json");
  cfg->set_kind("data");
  cfg->set_verdict(v1::VERDICT_SUSPICIOUS);
  v1::Finding* f = cfg->add_findings();
  f->set_rule_id("repo.remote_code");
  f->set_severity(v1::SEVERITY_MEDIUM);
  f->set_verdict(v1::VERDICT_SUSPICIOUS);
  f->set_message("auto_map names the repository's own code");
  v1::FileReport* gone = r.add_files();
  gone->set_path("repo/gone.bin");
  gone->set_verdict(v1::VERDICT_ERROR);
  v1::SkippedPath* s = r.add_skipped();
  s->set_path("repo/.git");
  s->set_reason("git metadata (.git): no model loader reads it");
  FoldVerdict(&r);
  return r;
}

TEST(ReportSummaryTest, CountsPerVerdictAndKindAndTheSkippedList) {
  const v1::Report r = RepositoryReport();
  EXPECT_EQ(r.verdict(), v1::VERDICT_DANGEROUS);
  const v1::Summary& s = r.summary();
  EXPECT_EQ(s.files(), 4u);
  EXPECT_EQ(s.safe(), 1u);
  EXPECT_EQ(s.suspicious(), 1u);
  EXPECT_EQ(s.dangerous(), 1u);
  EXPECT_EQ(s.error(), 1u);
  EXPECT_EQ(s.skipped(), 1u);
  EXPECT_EQ(s.kinds().at("model"), 2u);
  EXPECT_EQ(s.kinds().at("data"), 1u);
  EXPECT_EQ(s.kinds().at("unverified"), 1u);  // never read to the end: no kind

  const Json j = Json::parse(ReportToJson(r));
  EXPECT_EQ(j["summary"]["files"], 4);
  EXPECT_EQ(j["summary"]["error"], 1);
  EXPECT_EQ(j["summary"]["skipped"], 1);
  EXPECT_EQ(j["summary"]["kinds"]["data"], 1);
  ASSERT_EQ(j["skipped"].size(), 1u);
  EXPECT_EQ(j["skipped"][0]["path"], "repo/.git");
  EXPECT_EQ(j["files"][2]["kind"], "data");

  const std::string text = ReportToText(r);
  EXPECT_THAT(text, HasSubstr("kinds: 1 data, 2 model, 1 unverified; 1 skipped"));

  const std::string xml = ReportToJunit(r, FailOn::kDangerous);
  EXPECT_THAT(xml, HasSubstr("tests=\"5\""));
  EXPECT_THAT(xml, HasSubstr("skipped=\"1\""));
  EXPECT_THAT(xml, HasSubstr("name=\"repo/.git\""));
  EXPECT_THAT(xml, HasSubstr("<skipped message=\"git metadata (.git): no model loader reads it\""));

  // SARIF: the run's exit code, and a data file's SUSPICIOUS finding as a note (no error-level
  // alert for a config file); a model's finding keeps its level.
  const Json sarif = Json::parse(ReportToSarif(r, TestCatalogue(), 1));
  const Json& run = sarif["runs"][0];
  EXPECT_EQ(run["invocations"][0]["exitCode"], 1);
  EXPECT_EQ(run["invocations"][0]["executionSuccessful"], true);
  bool saw_note = false;
  for (const Json& res : run["results"]) {
    if (res["ruleId"] == "repo.remote_code") {
      EXPECT_EQ(res["level"], "note");
      saw_note = true;
    }
    if (res["ruleId"] == "global.denied.shell") {
      EXPECT_EQ(res["level"], "error");
    }
  }
  EXPECT_TRUE(saw_note);
}

TEST(ReportJsonTest, KeysAndNestingFollowDesign) {
  const Json j = Json::parse(ReportToJson(SampleReport()));
  EXPECT_THAT(Keys(j), ElementsAre("schema", "scanner_version", "rules_version", "verdict", "files",
                                   "summary", "skipped"));
  EXPECT_EQ(j["schema"], "ckptscan.report.v1");
  EXPECT_EQ(j["scanner_version"], "0.1.0");
  EXPECT_EQ(j["rules_version"], "2024.1");
  EXPECT_EQ(j["verdict"], "DANGEROUS");
  ASSERT_EQ(j["files"].size(), 2u);

  const Json& f = j["files"][0];
  EXPECT_THAT(Keys(f), ElementsAre("path", "sha256", "size", "format", "kind", "verdict",
                                   "findings", "errors", "tensors", "pickles", "globals"));
  EXPECT_EQ(f["path"], "models/evil.pkl");
  EXPECT_EQ(f["sha256"], std::string(64, 'a'));
  EXPECT_EQ(f["format"], "pickle");
  EXPECT_EQ(f["verdict"], "DANGEROUS");
  EXPECT_THAT(Keys(f["tensors"]),
              ElementsAre("count", "bytes", "storages", "shared", "unsupported"));

  const Json& finding = f["findings"][0];
  EXPECT_THAT(Keys(finding), ElementsAre("rule_id", "severity", "category", "global", "call",
                                         "location", "message", "verdict"));
  EXPECT_EQ(finding["rule_id"], "global.denied.shell");
  EXPECT_EQ(finding["severity"], "CRITICAL");
  EXPECT_EQ(finding["category"], "shell");
  EXPECT_EQ(finding["global"], "posix.system");
  EXPECT_EQ(finding["call"], "posix.system('id')");
  EXPECT_EQ(finding["message"], "runs a shell command");
  EXPECT_EQ(finding["verdict"], "DANGEROUS");
  EXPECT_THAT(Keys(finding["location"]), ElementsAre("member", "offset", "opcode"));
  EXPECT_EQ(finding["location"]["member"], "");
  EXPECT_EQ(finding["location"]["offset"], 57);
  EXPECT_EQ(finding["location"]["opcode"], "REDUCE");

  const Json& error = f["errors"][0];
  EXPECT_THAT(Keys(error), ElementsAre("code", "message", "location", "limit_name", "limit_value"));
  EXPECT_EQ(error["code"], "limit");
  EXPECT_EQ(error["limit_name"], "max_opcodes");
  EXPECT_EQ(error["limit_value"], 1000);

  const Json& ok = j["files"][1];
  EXPECT_EQ(ok["verdict"], "SAFE");
  EXPECT_TRUE(ok["findings"].is_array());
  EXPECT_TRUE(ok["findings"].empty());
  EXPECT_TRUE(ok["errors"].is_array());
  EXPECT_TRUE(ok["errors"].empty());
}

TEST(ReportJsonTest, NumbersAreJsonNumbersEvenAbove2To53) {
  v1::Report r = SampleReport();
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  r.mutable_files(0)->set_size(kMax);
  r.mutable_files(0)->mutable_findings(0)->mutable_location()->set_offset(kMax - 1);
  r.mutable_files(0)->mutable_tensors()->set_count(3);
  r.mutable_files(0)->mutable_tensors()->set_bytes(kMax - 2);
  const std::string text = ReportToJson(r);
  EXPECT_THAT(text, HasSubstr("\"size\": 18446744073709551615"));
  const Json j = Json::parse(text);
  const Json& f = j["files"][0];
  for (const Json* n :
       {&f["size"], &f["pickles"], &f["globals"], &f["tensors"]["count"], &f["tensors"]["bytes"],
        &f["findings"][0]["location"]["offset"], &f["errors"][0]["limit_value"]}) {
    EXPECT_TRUE(n->is_number_unsigned()) << n->dump();
  }
  EXPECT_EQ(f["size"].get<uint64_t>(), kMax);
  EXPECT_EQ(f["findings"][0]["location"]["offset"].get<uint64_t>(), kMax - 1);
  EXPECT_EQ(f["tensors"]["bytes"].get<uint64_t>(), kMax - 2);
}

TEST(ReportJsonTest, LocationAddsPickleIndexAndNestedDepthOnlyWhenNonZero) {
  v1::Report r = SampleReport();
  v1::Location* l = r.mutable_files(0)->mutable_findings(0)->mutable_location();
  l->set_pickle_index(2);
  l->set_nested_depth(1);
  Json j = Json::parse(ReportToJson(r));
  EXPECT_THAT(Keys(j["files"][0]["findings"][0]["location"]),
              ElementsAre("member", "offset", "opcode", "pickle_index", "nested_depth"));
  EXPECT_EQ(j["files"][0]["findings"][0]["location"]["pickle_index"], 2);
  EXPECT_EQ(j["files"][0]["findings"][0]["location"]["nested_depth"], 1);
  EXPECT_THAT(Keys(j["files"][0]["errors"][0]["location"]),
              ElementsAre("member", "offset", "opcode"));
}

TEST(ReportJsonTest, LimitFieldsAppearOnlyOnLimitErrors) {
  v1::Report r = SampleReport();
  v1::ScanError* e = r.mutable_files(0)->add_errors();
  e->set_code(v1::ERROR_CODE_MALFORMED);
  e->set_message("truncated");
  const Json j = Json::parse(ReportToJson(r));
  EXPECT_THAT(Keys(j["files"][0]["errors"][1]), ElementsAre("code", "message", "location"));
}

TEST(ReportJsonTest, SameReportGivesSameBytesWithTwoSpaceIndentAndNewline) {
  const std::string a = ReportToJson(SampleReport());
  const std::string b = ReportToJson(SampleReport());
  EXPECT_EQ(a, b);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back(), '\n');
  EXPECT_TRUE(a.starts_with("{\n  \"schema\": \"ckptscan.report.v1\",\n  \"scanner_version\""))
      << a;
}

TEST(ReportJsonTest, EmptyReportHasEmptyFilesArray) {
  v1::Report r;
  r.set_verdict(v1::VERDICT_ERROR);
  const Json j = Json::parse(ReportToJson(r));
  EXPECT_EQ(j["schema"], "ckptscan.report.v1");
  EXPECT_EQ(j["verdict"], "ERROR");
  EXPECT_TRUE(j["files"].is_array());
  EXPECT_TRUE(j["files"].empty());
}

TEST(ReportJsonTest, InvalidUtf8FromAScannedFileIsReplacedNotThrown) {
  v1::Report r = SampleReport();
  // A lone surrogate as the VM keeps it (3-byte sequence) and a stray byte.
  r.mutable_files(0)->mutable_findings(0)->set_global("os.\xed\xa0\x80sys\xfftem");
  r.mutable_files(0)->set_path("bad\xc3name.pkl");
  const std::string text = ReportToJson(r);
  const Json j = Json::parse(text);  // valid JSON, valid UTF-8
  EXPECT_THAT(j["files"][0]["findings"][0]["global"].get<std::string>(), HasSubstr("sys"));
  EXPECT_THAT(text, Not(HasSubstr("\xff")));
}

TEST(ReportJsonTest, ControlCharactersAreEscaped) {
  v1::Report r = SampleReport();
  r.mutable_files(0)->mutable_findings(0)->set_call("posix.system('\x1b[2J')");
  const std::string text = ReportToJson(r);
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(text, HasSubstr("\\u001b[2J"));
}

// ------------------------------------------------------------------ SARIF

TEST(ReportSarifTest, HasTheRequired210Structure) {
  const Json s = Json::parse(ReportToSarif(SampleReport(), TestCatalogue()));
  EXPECT_EQ(s["$schema"], "https://json.schemastore.org/sarif-2.1.0.json");
  EXPECT_EQ(s["version"], "2.1.0");
  ASSERT_TRUE(s["runs"].is_array());
  ASSERT_EQ(s["runs"].size(), 1u);
  const Json& run = s["runs"][0];
  const Json& driver = run["tool"]["driver"];
  EXPECT_EQ(driver["name"], "ckptscan");
  EXPECT_EQ(driver["version"], "0.1.0");
  EXPECT_TRUE(driver["informationUri"].is_string());
  ASSERT_TRUE(driver["rules"].is_array());
  for (const Json& d : driver["rules"]) {
    for (const char* key :
         {"id", "name", "shortDescription", "fullDescription", "help", "defaultConfiguration"}) {
      EXPECT_TRUE(d.contains(key)) << key << " in " << d.dump();
    }
    EXPECT_TRUE(d["shortDescription"]["text"].is_string());
    EXPECT_TRUE(d["fullDescription"]["text"].is_string());
    EXPECT_TRUE(d["help"]["text"].is_string());
    EXPECT_TRUE(d["defaultConfiguration"]["level"].is_string());
  }
  ASSERT_EQ(run["results"].size(), 2u);  // one finding, one error
  for (const Json& r : run["results"]) {
    EXPECT_TRUE(r["ruleId"].is_string());
    EXPECT_TRUE(r["message"]["text"].is_string());
    EXPECT_EQ(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "models/evil.pkl");
    EXPECT_EQ(r["partialFingerprints"]["ckptscanFinding/v1"].get<std::string>().size(), 64u);
  }
  const Json& finding = run["results"][0];
  EXPECT_EQ(finding["ruleId"], "global.denied.shell");
  EXPECT_EQ(finding["level"], "error");
  // GitHub code scanning needs a line; the byte offset is in the text and the
  // properties.
  EXPECT_EQ(finding["locations"][0]["physicalLocation"]["region"]["startLine"], 1);
  EXPECT_EQ(finding["properties"]["offset"], 57);
  EXPECT_THAT(finding["message"]["text"].get<std::string>(), HasSubstr("at byte 57"));
  const Json& error = run["results"][1];
  EXPECT_EQ(error["ruleId"], "scan.error");
  EXPECT_EQ(error["level"], "error");
  EXPECT_THAT(error["message"]["text"].get<std::string>(), HasSubstr("max_opcodes=1000"));
}

TEST(ReportSarifTest, OneRuleDescriptorPerRuleIdUsedSortedWithMatchingRuleIndex) {
  v1::Report r = SampleReport();
  v1::FileReport* f = r.mutable_files(0);
  *f->add_findings() = ShellFinding(80);  // same rule again
  v1::Finding unknown = ShellFinding(100);
  unknown.set_rule_id("global.unknown");
  unknown.set_verdict(v1::VERDICT_SUSPICIOUS);
  *f->add_findings() = unknown;
  const Json run = Json::parse(ReportToSarif(r, TestCatalogue()))["runs"][0];
  std::vector<std::string> ids;
  for (const Json& d : run["tool"]["driver"]["rules"]) ids.push_back(d["id"]);
  EXPECT_THAT(ids, ElementsAre("global.denied.shell", "global.unknown", "scan.error"));
  for (const Json& res : run["results"]) {
    EXPECT_EQ(run["tool"]["driver"]["rules"][res["ruleIndex"].get<size_t>()]["id"], res["ruleId"]);
  }
  EXPECT_EQ(run["results"][2]["level"], "warning");  // SUSPICIOUS
}

TEST(ReportSarifTest, RuleMetadataComesFromTheCatalogue) {
  const Json rules = Json::parse(
      ReportToSarif(SampleReport(), TestCatalogue()))["runs"][0]["tool"]["driver"]["rules"];
  const Json& d = rules[0];
  EXPECT_EQ(d["id"], "global.denied.shell");
  EXPECT_EQ(d["name"], "GlobalDeniedShell");
  EXPECT_EQ(d["shortDescription"]["text"], "Shell command global");
  EXPECT_EQ(d["fullDescription"]["text"], "Runs shell commands when loaded.");
  EXPECT_EQ(d["help"]["text"], "Runs shell commands when loaded.");
  EXPECT_EQ(d["defaultConfiguration"]["level"], "error");
}

TEST(ReportSarifTest, RuleIdMissingFromTheCatalogueStillGetsADescriptor) {
  const Json rules =
      Json::parse(ReportToSarif(SampleReport(), {}))["runs"][0]["tool"]["driver"]["rules"];
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0]["id"], "global.denied.shell");
  EXPECT_EQ(rules[0]["shortDescription"]["text"], "global.denied.shell");
  EXPECT_EQ(rules[1]["id"], "scan.error");
}

TEST(ReportSarifTest, FingerprintsAreStableAndDistinct) {
  v1::Report r = SampleReport();
  *r.mutable_files(0)->add_findings() = ShellFinding(80);  // other offset
  *r.mutable_files(1)->add_findings() = ShellFinding(57);  // other path
  v1::Finding in_member = ShellFinding(57);
  in_member.mutable_location()->set_member("archive/data.pkl");  // other member
  *r.mutable_files(0)->add_findings() = in_member;
  const std::string a = ReportToSarif(r, TestCatalogue());
  EXPECT_EQ(a, ReportToSarif(r, TestCatalogue()));
  std::set<std::string> prints;
  const Json results = Json::parse(a)["runs"][0]["results"];
  for (const Json& res : results) prints.insert(res["partialFingerprints"]["ckptscanFinding/v1"]);
  EXPECT_EQ(prints.size(), results.size());
  // The fingerprint is a function of rule_id|path|member|global|offset only.
  v1::Report moved = r;
  moved.mutable_files(0)->mutable_findings(0)->set_message("reworded");
  moved.mutable_files(0)->mutable_findings(0)->set_call("posix.system('other')");
  EXPECT_EQ(Json::parse(ReportToSarif(
                moved, TestCatalogue()))["runs"][0]["results"][0]["partialFingerprints"],
            results[0]["partialFingerprints"]);
}

TEST(ReportSarifTest, EveryResultIsOnLineOneWithWhereInTextAndProperties) {
  v1::Report r = SampleReport();
  v1::FileReport* f = r.mutable_files(0);
  f->mutable_findings(0)->mutable_location()->set_member("archive/data.pkl");
  v1::ScanError* unsupported = f->add_errors();  // no location at all
  unsupported->set_code(v1::ERROR_CODE_UNSUPPORTED);
  unsupported->set_message("gzip");
  const Json results = Json::parse(ReportToSarif(r, TestCatalogue()))["runs"][0]["results"];
  ASSERT_EQ(results.size(), 3u);
  for (const Json& res : results) {
    const Json& region = res["locations"][0]["physicalLocation"]["region"];
    EXPECT_EQ(region, Json({{"startLine", 1}})) << res.dump();
  }
  EXPECT_THAT(results[0]["message"]["text"].get<std::string>(),
              HasSubstr("at byte 57 of member archive/data.pkl"));
  EXPECT_EQ(results[0]["properties"]["member"], "archive/data.pkl");
  EXPECT_EQ(results[0]["properties"]["offset"], 57);
  EXPECT_EQ(results[1]["properties"]["offset"], 90);
  EXPECT_EQ(results[2]["properties"]["offset"], 0);
}

TEST(ReportSarifTest, DigestMismatchHasItsOwnRule) {
  v1::Report r = SampleReport();
  v1::ScanError* e = r.mutable_files(1)->add_errors();
  e->set_code(v1::ERROR_CODE_DIGEST_MISMATCH);
  e->set_message("sha256 a is not the b the manifest lists");
  const Json run = Json::parse(ReportToSarif(r, TestCatalogue()))["runs"][0];
  std::set<std::string> ids;
  for (const Json& d : run["tool"]["driver"]["rules"]) ids.insert(d["id"].get<std::string>());
  EXPECT_TRUE(ids.count(std::string(kDigestMismatchRuleId)));
  const Json& last = run["results"][run["results"].size() - 1];
  EXPECT_EQ(last["ruleId"], kDigestMismatchRuleId);
  EXPECT_EQ(last["level"], "error");
}

TEST(ReportSarifTest, RelativePathsStayAsGivenAbsoluteOnesBecomeFileUris) {
  v1::Report r = SampleReport();
  r.mutable_files(0)->set_path("my models/a#1.pkl");
  r.mutable_files(1)->set_path("/srv/m.pkl");
  *r.mutable_files(1)->add_findings() = ShellFinding(3);
  const Json results = Json::parse(ReportToSarif(r, TestCatalogue()))["runs"][0]["results"];
  EXPECT_EQ(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "my%20models/a%231.pkl");
  EXPECT_EQ(results[2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "file:///srv/m.pkl");
}

TEST(ReportSarifTest, NoFindingsGivesEmptyResultsAndRules) {
  v1::Report r;
  r.set_scanner_version("0.1.0");
  r.set_verdict(v1::VERDICT_SAFE);
  v1::FileReport* f = r.add_files();
  f->set_path("ok.pkl");
  f->set_verdict(v1::VERDICT_SAFE);
  const Json run = Json::parse(ReportToSarif(r, TestCatalogue()))["runs"][0];
  EXPECT_TRUE(run["results"].is_array());
  EXPECT_TRUE(run["results"].empty());
  EXPECT_TRUE(run["tool"]["driver"]["rules"].is_array());
  EXPECT_TRUE(run["tool"]["driver"]["rules"].empty());
}

// ------------------------------------------------------------------ text

TEST(ReportTextTest, ShowsFindingsEvenWhenThereAreAlsoErrors) {
  const std::string text = ReportToText(SampleReport());
  EXPECT_THAT(text, HasSubstr("models/evil.pkl: DANGEROUS (pickle, 1 pickle, 1 global)\n"));
  EXPECT_THAT(text, HasSubstr("  CRITICAL global.denied.shell posix.system at offset 57 (REDUCE): "
                              "runs a shell command\n"));
  EXPECT_THAT(text, HasSubstr("      call: posix.system('id')\n"));
  EXPECT_THAT(text, HasSubstr("  error limit at offset 90 (MARK): too many opcodes "
                              "[limit max_opcodes=1000]\n"));
  EXPECT_LT(text.find("CRITICAL"), text.find("error limit"));
  EXPECT_THAT(text, HasSubstr("models/ok.pkl: SAFE (pickle, 1 pickle, 0 globals)\n"));
}

TEST(ReportTextTest, SummaryLineCountsFilesPerVerdict) {
  const std::string text = ReportToText(SampleReport());
  EXPECT_THAT(text, testing::EndsWith("2 files: 1 SAFE, 0 SUSPICIOUS, 1 DANGEROUS, 0 "
                                      "ERROR; verdict DANGEROUS\n"));
}

TEST(ReportTextTest, MemberAndNestedLocationsAreShown) {
  v1::Report r = SampleReport();
  v1::Location* l = r.mutable_files(0)->mutable_findings(0)->mutable_location();
  l->set_member("archive/data.pkl");
  l->set_pickle_index(3);
  l->set_nested_depth(1);
  EXPECT_THAT(ReportToText(r),
              HasSubstr("at archive/data.pkl@57 [pickle 3, nested depth 1] (REDUCE)"));
}

TEST(ReportTextTest, TerminalControlsFromTheFileAreNeutralised) {
  v1::Report r = SampleReport();
  r.mutable_files(0)->mutable_findings(0)->set_call("posix.system('\x1b]0;owned\x07')");
  r.mutable_files(0)->set_path("evil\r\nfake.pkl: SAFE");
  const std::string text = ReportToText(r);
  EXPECT_THAT(text, Not(HasSubstr("\x1b")));
  EXPECT_THAT(text, Not(HasSubstr("\x07")));
  EXPECT_THAT(text, HasSubstr("posix.system('\\x1b]0;owned\\x07')"));
  EXPECT_THAT(text, HasSubstr("evil\\r\\nfake.pkl: SAFE: DANGEROUS"));
}

TEST(TerminalSafeTest, KeepsPrintableUtf8) {
  EXPECT_EQ(TerminalSafe("torch._utils._rebuild_tensor_v2"), "torch._utils._rebuild_tensor_v2");
  EXPECT_EQ(TerminalSafe("modèle_日本.pkl"), "modèle_日本.pkl");
}

TEST(TerminalSafeTest, EscapesC0C1DelBidiAndInvalidBytes) {
  EXPECT_EQ(TerminalSafe("a\tb\nc\rd"), "a\\tb\\nc\\rd");
  EXPECT_EQ(TerminalSafe("\x1b[31m"), "\\x1b[31m");
  EXPECT_EQ(TerminalSafe("\x7f"), "\\x7f");
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "2J"),
            "\\u{9b}2J");                                                // C1 CSI
  EXPECT_EQ(TerminalSafe("os\xe2\x80\xaemetsys"), "os\\u{202e}metsys");  // RLO
  EXPECT_EQ(TerminalSafe("a\xffz"), "a\\xffz");
  EXPECT_EQ(TerminalSafe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // lone surrogate
  EXPECT_EQ(TerminalSafe("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(TerminalSafe("\xe6\x97"), "\\xe6\\x97");           // truncated sequence
}

TEST(ReportJsonTest, ShardsAndExpectedDigestAppearOnlyWhenSet) {
  v1::Report r = SampleReport();
  r.mutable_files(0)->add_shards("a.bin");
  r.mutable_files(0)->set_expected_sha256(std::string(64, 'a'));
  const Json j = Json::parse(ReportToJson(r));
  EXPECT_EQ(j["files"][0]["shards"], Json::array({"a.bin"}));
  EXPECT_EQ(j["files"][0]["expected_sha256"], std::string(64, 'a'));
  EXPECT_FALSE(j["files"][1].contains("shards"));
  EXPECT_FALSE(j["files"][1].contains("expected_sha256"));
}

TEST(ReportJunitTest, FailuresForFindingsErrorsForErrorsAndCounts) {
  v1::Report r = SampleReport();  // DANGEROUS file (findings + an error), a SAFE file
  v1::FileReport* broken = r.add_files();
  broken->set_path("cut.pkl");
  broken->set_verdict(v1::VERDICT_ERROR);
  *broken->add_errors() = LimitError();
  const std::string xml = ReportToJunit(r, FailOn::kSuspicious);
  EXPECT_THAT(
      xml,
      HasSubstr(
          "<testsuites name=\"ckptscan\" tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\">"));
  EXPECT_THAT(xml, HasSubstr("<failure type=\"DANGEROUS\""));
  EXPECT_THAT(xml, HasSubstr("<error type=\"ERROR\""));
  EXPECT_THAT(xml, HasSubstr("error limit at byte 90, opcode MARK: too many opcodes"));
}

TEST(ReportJunitTest, MarkupControlsAndInvalidBytesFromTheFileAreEscaped) {
  v1::Report r = SampleReport();
  v1::FileReport* f = r.mutable_files(0);
  f->set_path("a<b>&\"c'.pkl");
  f->mutable_findings(0)->set_call(std::string("x(']]></failure>\x1b[2J\xff\xef\xbf\xbe')"));
  const std::string xml = ReportToJunit(r, FailOn::kSuspicious);
  EXPECT_THAT(xml, HasSubstr("name=\"a&lt;b&gt;&amp;&quot;c&apos;.pkl\""));
  EXPECT_THAT(xml, Not(HasSubstr("</failure>\x1b")));
  EXPECT_THAT(xml, HasSubstr("]]&gt;&lt;/failure&gt;\\x1b[2J\\xff\\u{FFFE}"));
  for (char c : xml) {
    const unsigned char u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u >= 0x20 || c == '\n') << "control byte " << int(u);
  }
}

TEST(ReportJunitTest, SuspiciousPassesWithItsFindingsUnderFailOnDangerous) {
  v1::Report r;
  v1::FileReport* f = r.add_files();
  f->set_path("odd.pkl");
  f->set_verdict(v1::VERDICT_SUSPICIOUS);
  v1::Finding* x = f->add_findings();
  x->set_rule_id("global.unlisted");
  x->set_verdict(v1::VERDICT_SUSPICIOUS);
  const std::string pass = ReportToJunit(r, FailOn::kDangerous);
  EXPECT_THAT(pass, HasSubstr("failures=\"0\" errors=\"0\""));
  EXPECT_THAT(pass, HasSubstr("<system-out>SUSPICIOUS"));
  EXPECT_THAT(ReportToJunit(r, FailOn::kSuspicious), HasSubstr("<failure type=\"SUSPICIOUS\""));
}

}  // namespace
}  // namespace ckptscan::app
