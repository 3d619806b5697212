// The in-process scan of one file: ExtractFacts and JudgeFacts in the calling
// process. For tests and benchmarks only: no shipped binary links it (`ckptscan
// --no-sandbox` runs an unjailed worker child; the default is the jailed scan,
// sandbox/run.h).
//
// The two halves run in different processes in a jailed scan:
//   ExtractFacts  (sandbox/worker/extract_facts.h) untrusted bytes -> FileFacts: format
//                 detection by content and the symbolic pickle VM. The worker's
//                 job: it never sees the rules and decides no verdict.
//   JudgeFacts    (app/judge.h) FileFacts + RuleSet -> v1::FileReport:
//                 VM errors become report errors, the rules add findings, the
//                 verdict is decided. The trusted side's job.
// ScanFileInProcess reads the file (mmap, SHA-256, size) and runs both halves
// here.
//
// Thread-safe: every function is reentrant; a RuleSet is immutable.
//
//   auto rules = rules::RuleSet::Default();
//   absl::StatusOr<v1::FileReport> r = ScanFileInProcess(path,
//   *rules, {}); v1::FileReport report = r.ok() ? *std::move(r) :
//   app::UnreadableFileReport(path, r.status());
#ifndef CKPTSCAN_TESTS_INPROCESS_LOCAL_SCAN_H_
#define CKPTSCAN_TESTS_INPROCESS_LOCAL_SCAN_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "app/judge.h"
#include "app/output_file.h"
#include "app/shard_set.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/vm.h"
#include "rules/rule_set.h"
#include "sandbox/file_facts.h"
#include "sandbox/worker/extract_facts.h"

namespace ckptscan::inprocess {

// MODE_DISASM as the worker runs it, in this process: ExtractFacts with the opcode listing
// written through `out` as the VM runs. `listed` says whether any listing line was written.
sandbox::FileFacts ExtractFactsWithListing(std::string_view bytes, const pickle::Limits& limits,
                                           const std::function<void(std::string_view)>& out,
                                           bool* listed);

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
// (app/shard_set.h). `check` (may be empty) runs on the plan before publishing. A non-OK
// status means the input could not be read at all.
absl::StatusOr<app::ConvertResult> ConvertFileInProcess(const app::ConvertRequest& request,
                                                        const rules::RuleSet& rules,
                                                        const pickle::Limits& limits,
                                                        const app::PlanCheck& check = nullptr);

}  // namespace ckptscan::inprocess

#endif  // CKPTSCAN_TESTS_INPROCESS_LOCAL_SCAN_H_
