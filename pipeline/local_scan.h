// The in-process scan of one file: ExtractFacts and JudgeFacts in the calling
// process. This is what `ckptscan scan --no-sandbox` runs (debugging only); the
// default is the jailed scan (pipeline/jailed_scan.h).
//
// The two halves run in different processes in a jailed scan:
//   ExtractFacts  (pipeline/extract_facts.h) untrusted bytes -> FileFacts: format
//                 detection by content and the symbolic pickle VM. The worker's
//                 job: it never sees the rules and decides no verdict.
//   JudgeFacts    (pipeline/judge_facts.h) FileFacts + RuleSet -> v1::FileReport:
//                 VM errors become report errors, the rules add findings, the
//                 verdict is decided. The trusted side's job.
// ScanFileInProcess reads the file (mmap, SHA-256, size) and runs both halves
// here.
//
// Thread-safe: every function is reentrant; a RuleSet is immutable.
//
//   auto rules = rules::RuleSet::Default();
//   absl::StatusOr<v1::FileReport> r = pipeline::ScanFileInProcess(path,
//   *rules, {}); v1::FileReport report = r.ok() ? *std::move(r) :
//   pipeline::UnreadableFileReport(path, r.status());
#ifndef CKPTSCAN_PIPELINE_LOCAL_SCAN_H_
#define CKPTSCAN_PIPELINE_LOCAL_SCAN_H_

#include <string>

#include "absl/status/statusor.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/vm.h"
#include "pipeline/extract_facts.h"
#include "pipeline/file_facts.h"
#include "pipeline/judge_facts.h"
#include "pipeline/output_file.h"
#include "pipeline/shard_set.h"
#include "rules/rule_set.h"

namespace ckptscan::pipeline {

// Reads `path` (symlinks followed; regular files only), hashes it and scans it.
// A non-OK status means the file could not be read at all; see
// UnreadableFileReport.
// `sha256` false leaves the report's digest empty (--digest none).
absl::StatusOr<v1::FileReport> ScanFileInProcess(const std::string& path,
                                                 const rules::RuleSet& rules,
                                                 const pickle::Limits& limits, bool sha256 = true);

// `ckptscan convert --no-sandbox`: scans `request.input` as ScanFileInProcess does and, if it
// is SAFE, writes the safetensors conversion to an unlinked file next to `request.output`,
// validates it and links it there. A sharded checkpoint's index converts as a set
// (pipeline/shard_set.h). `check` (may be empty) runs on the plan before publishing. A non-OK
// status means the input could not be read at all.
absl::StatusOr<ConvertResult> ConvertFileInProcess(const ConvertRequest& request,
                                                   const rules::RuleSet& rules,
                                                   const pickle::Limits& limits,
                                                   const PlanCheck& check = nullptr);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_LOCAL_SCAN_H_
