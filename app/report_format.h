// Renderings of a scan report: JSON (the schema in docs/report.md), text for
// people, SARIF 2.1.0 for CI code scanning and JUnit XML for CI test views.
//
// Every rendering is deterministic: the same report gives the same bytes (no
// clocks, no hash order). Strings that come from scanned files are escaped for
// their medium: JSON by JSON's rules (bytes that are not UTF-8 become U+FFFD),
// text by TerminalSafe so a file cannot drive the reader's terminal, XML by
// TerminalSafe and then XML's escapes (only XML 1.0 characters are written).
// Thread-safe: pure functions.
//
//   std::string out = app::ReportToSarif(report, rules::Catalogue());
#ifndef CKPTSCAN_APP_REPORT_FORMAT_H_
#define CKPTSCAN_APP_REPORT_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "app/verdict.h"
#include "ckptscan/v1/report.pb.h"
#include "rules/catalogue.h"

namespace ckptscan::app {

inline constexpr std::string_view kReportSchema = "ckptscan.report.v1";
// SARIF partialFingerprints key: hex SHA-256 of
// "rule_id|path|member|global|offset".
inline constexpr std::string_view kFingerprintKey = "ckptscanFinding/v1";
// The SARIF rule id of results that are scan errors rather than findings.
inline constexpr std::string_view kScanErrorRuleId = "scan.error";
// scan --manifest: the SARIF rule id of a file whose SHA-256 is not the one the manifest
// lists (error code digest_mismatch).
inline constexpr std::string_view kDigestMismatchRuleId = "manifest.digest_mismatch";

// Pretty-printed (2-space indent) JSON with a trailing newline; keys in
// docs/report.md order.
std::string ReportToJson(const v1::Report& report);

// For people: per file a header line, findings (with their call), then errors;
// a summary line.
// With `only_unsafe` (scan --quiet) the SAFE files' lines are left out; the summary counts all.
std::string ReportToText(const v1::Report& report, bool only_unsafe = false);
// The lines ReportToText prints for one file (with `tensor_lines`, a line per tensor_list entry).
std::string FileReportToText(const v1::FileReport& file, bool tensor_lines = true);

// ckptscan ls: per file its ReportToText lines (verdict, findings, errors) and a table of its
// tensors (name, dtype, shape, bytes, storage, shared, note), then ReportToText's summary.
std::string TensorTableText(const v1::Report& report);

// SARIF 2.1.0, one run. `catalogue` describes the rule ids (pass
// rules::Catalogue()); an id missing from it still gets a descriptor, with the
// id as its description. `exit_code` (0, 1, 2; -1: not known) goes into the run's
// invocations. A SUSPICIOUS finding on a data file is a note.
std::string ReportToSarif(const v1::Report& report, absl::Span<const rules::RuleInfo> catalogue,
                          int exit_code = -1);

// JUnit XML (the de-facto schema Jenkins, GitLab and most CI test views read):
// one <testsuite>, one <testcase> per file (name = path). A file whose verdict
// fails under `fail_on` has a <failure> (SUSPICIOUS, DANGEROUS), an ERROR file
// an <error>; their body lists the findings and errors, one per line. A passing
// file with findings (SUSPICIOUS under kDangerous, informational ones) lists
// them in <system-out>. Every skipped path is a <testcase> with <skipped>, counted in
// tests= and skipped=.
std::string ReportToJunit(const v1::Report& report, FailOn fail_on);

// `text` with everything that could act on a terminal made visible: C0/C1
// controls and DEL as \n, \t, \r, \xNN or \u{NN}, bidirectional overrides as
// \u{NNNN}, bytes that are not UTF-8 as \xNN. Printable UTF-8 is kept.
std::string TerminalSafe(std::string_view text);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_REPORT_FORMAT_H_
