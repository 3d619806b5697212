// The in-process scan of one file: what the CLI runs until the jailed worker
// lands.
//
// The two halves are kept apart because they will run in different processes:
//   ExtractFacts  untrusted bytes -> FileFacts: format detection by content and
//   the symbolic
//                 pickle VM. The worker's job: it never sees the rules and
//                 decides no verdict.
//   JudgeFacts    FileFacts + RuleSet -> v1::FileReport: VM errors become
//   report errors, the
//                 rules add findings, the verdict is decided. The trusted
//                 side's job.
// ScanFileInProcess reads the file (mmap, SHA-256, size) and runs both halves
// here.
//
// Verdict: the worst of the findings (rules::WorseVerdict: findings win over
// errors), and ERROR if there is any error. Nothing is SAFE unless every pickle
// parsed whole: an empty file, an unsupported container or a stream without one
// complete pickle is ERROR.
//
// Thread-safe: every function is reentrant; a RuleSet is immutable.
//
//   auto rules = rules::RuleSet::Default();
//   absl::StatusOr<v1::FileReport> r = pipeline::ScanFileInProcess(path,
//   *rules, {}); v1::FileReport report = r.ok() ? *std::move(r) :
//   pipeline::UnreadableFileReport(path, r.status());
#ifndef CKPTSCAN_PIPELINE_LOCAL_SCAN_H_
#define CKPTSCAN_PIPELINE_LOCAL_SCAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/facts.h"
#include "core/pickle/vm.h"
#include "rules/rule_set.h"

namespace ckptscan::pipeline {

// The facts of one pickle stream: a raw pickle file, or (later) one member of a
// container.
struct MemberFacts {
  std::string member;  // "" for a raw pickle file
  pickle::StreamFacts stream;
};

// What the worker side learns from a file's bytes. Facts only: no verdict.
struct FileFacts {
  // Detected from the content, never from the name: "pickle", "zip", "tar",
  // "gzip", "bzip2", "xz", "zstd", "lz4", "7z", "rar", or "empty".
  std::string format;
  // Why (part of) the file could not be scanned: unsupported container, empty
  // file.
  std::vector<v1::ScanError> errors;
  std::vector<MemberFacts> members;
};

// Detects the format and runs the VM over a raw pickle stream. `trace`, when
// given, receives every executed opcode (the disassembler).
FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace = nullptr);

// Facts + rules -> report: format, findings, errors, pickles, globals, tensors
// and verdict. path, sha256 and size are the caller's to fill.
v1::FileReport JudgeFacts(const FileFacts& facts, const rules::RuleSet& rules);

// One VM error as a report error (code "malformed", "limit" or "unsupported").
v1::ScanError ToScanError(const pickle::VmError& error, std::string_view member,
                          uint32_t pickle_index, uint32_t nested_depth);

// Reads `path` (symlinks followed; regular files only), hashes it and scans it.
// A non-OK status means the file could not be read at all; see
// UnreadableFileReport.
absl::StatusOr<v1::FileReport> ScanFileInProcess(const std::string& path,
                                                 const rules::RuleSet& rules,
                                                 const pickle::Limits& limits);

// The ERROR entry for a path that could not be read: one error with code "io"
// (or "internal" for an Internal status) carrying the status message.
v1::FileReport UnreadableFileReport(const std::string& path,
                                    const absl::Status& status);

}  // namespace ckptscan::pipeline

#endif  // CKPTSCAN_PIPELINE_LOCAL_SCAN_H_
