// Converting a file or a sharded set, the same on every surface: `ckptscan convert` (local or
// --server) and ckptscand's ConvertPath / ConvertUpload all parse their options with
// ApplyConvertOptions, check the output with CheckOutputAbsent and run Convert, with the one
// convert policy (ConvertPolicy) and the one report. Only where the output goes differs (the
// caller's ConvertRequest).
//
// ConvertFile: the trusted side hashes the input, then a jailed worker scans it and writes the
// conversion to an unlinked file next to `request.output`. The trusted side judges the facts
// (only SAFE keeps the output), plans the conversion from the facts itself and requires the
// output to carry exactly that header and size and to pass the strict validator, then links it
// (app/output_file.h), signed when the request carries a key (app/publish.h). An input that is
// a sharded checkpoint's index converts as a set (app/shard_set.h), each shard in its own
// worker.
//
// Thread-safe: no state of its own.
#ifndef CKPTSCAN_APP_CONVERT_H_
#define CKPTSCAN_APP_CONVERT_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/call_options.h"
#include "app/engine.h"
#include "app/output_file.h"
#include "app/shard_set.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/v1/scanner.pb.h"
#include "core/pickle/limits.h"
#include "rules/rule_set.h"
#include "sandbox/run.h"
#include "signing/manifest.h"

namespace ckptscan::app {

// What every surface answers for a conversion.
struct ConvertOutcome {
  // The scan's report, exactly as `scan` makes it (the input, then a set's shards), with
  // `conversion` on each file written; its verdict folded (FoldVerdict).
  v1::Report report;
  // True only when the verdict is SAFE and every output was written, validated and published.
  bool converted = false;
  // Why not, when the verdict was SAFE but the conversion failed (OK otherwise).
  absl::Status error;
};

// The request's options as every surface states them (the CLI's flags fill a
// v1::ConvertOptions too): dtype, select, strict, cast_quantized, replace, allow_dtypes and
// sign_method ("" = `default_method`). A bad value is InvalidArgument naming the field.
absl::Status ApplyConvertOptions(const v1::ConvertOptions& in, signing::Method default_method,
                                 ConvertRequest* request);

// Fail fast before any work: a file (not a directory: a sharded set checks its own) named
// `name` in the directory open on `dir_fd` is refused unless `replace`: AlreadyExists naming
// `shown`, with the surface's `replace_hint` ("--force", "the request's replace").
absl::Status CheckOutputAbsent(int dir_fd, const std::string& name, std::string_view shown,
                               bool replace, std::string_view replace_hint);

// The checks every conversion's plan passes before anything is published, whoever asked: an
// output with no tensor is refused (FailedPrecondition).
absl::Status ConvertPolicy(const convert::Plan& plan);

// One file, or a sharded set through its index, in jailed workers. `check` (may be empty) runs
// on the plan before publishing. A non-OK status means the input could not be read at all.
absl::StatusOr<ConvertResult> ConvertFile(const ConvertRequest& request,
                                          const rules::RuleSet& rules, const pickle::Limits& limits,
                                          const sandbox::JailOptions& options,
                                          const PlanCheck& check = nullptr);

// Every surface's conversion: ConvertFile with ConvertPolicy, made into the outcome.
// `scanner_version` and the rules' version head the report.
ConvertOutcome Convert(const ConvertRequest& request, const rules::RuleSet& rules,
                       const pickle::Limits& limits, const sandbox::JailOptions& jail,
                       std::string_view scanner_version);

// The same on the engine, for the call: the rules in force now (their version and
// `scanner_version` go into the request's provenance), the call's jail.
ConvertOutcome Convert(const Engine& engine, ConvertRequest request, const CallOptions& call,
                       std::string_view scanner_version);

// The same with another runner in place of ConvertFile (tests: an in-process conversion).
ConvertOutcome Convert(const ConvertRequest& request, const ConvertOneFn& run,
                       std::string_view scanner_version, std::string_view rules_version);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_CONVERT_H_
