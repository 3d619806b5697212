// JudgeFacts: FileFacts + RuleSet -> v1::FileReport. The trusted side's half of a scan.
//
// VM errors become report errors, the rules add findings, the verdict is decided. Linked by
// the trusted side only (the CLI and the daemon); it needs no parser.
//
// Verdict: the worst of the findings (rules::WorseVerdict: findings win over
// errors), and ERROR if there is any error. Nothing is SAFE unless every pickle
// parsed whole: an empty file, an unsupported container or a stream without one
// complete pickle is ERROR.
//
// Thread-safe: every function is reentrant; a RuleSet is immutable.
#ifndef CKPTSCAN_APP_JUDGE_H_
#define CKPTSCAN_APP_JUDGE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/facts.h"
#include "rules/rule_set.h"
#include "sandbox/file_facts.h"

namespace ckptscan::app {

// Facts + rules -> report: format, kind, findings, errors, pickles, globals, tensors
// and verdict. path, sha256 and size are the caller's to fill.
v1::FileReport JudgeFacts(const sandbox::FileFacts& facts, const rules::RuleSet& rules);

// Appends every tensor of `facts` to report->tensor_list (name, dtype, shape, bytes, storage,
// whether the storage is shared, why convert cannot write it). Nothing is judged by it.
void AddTensorList(const sandbox::FileFacts& facts, v1::FileReport* report);

// What a file's name alone makes a loader do, added to its report: a Python file (*.py) in a
// model repository is code that transformers imports with trust_remote_code=True (finding
// repo.remote_code, SUSPICIOUS; kind "code" for a text file). The path is not read.
void JudgeName(std::string_view path, v1::FileReport* report);

// The report kind of a format: "data" (torch::IsDataFormat), "unknown", "archive" (a zip
// read member by member), or "model".
std::string_view KindOfFormat(std::string_view format);

// One VM error as a report error (code "malformed", "limit" or "unsupported").
v1::ScanError ToScanError(const pickle::VmError& error, std::string_view member,
                          uint32_t pickle_index, uint32_t nested_depth);

// The ERROR entry for a path that could not be read: one error with code "io"
// (or "internal" for an Internal status) carrying the status message.
v1::FileReport UnreadableFileReport(const std::string& path, const absl::Status& status);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_JUDGE_H_
