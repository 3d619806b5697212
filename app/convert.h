// Converting a file or a sharded set, the same on every surface: `ckptscan convert` (local or
// --server) and ckptscand's ConvertPath / ConvertUpload all run Convert, with the one convert
// policy (ConvertPolicy) and the one report. Only the runner differs (a jailed worker, or this
// process for the CLI's --no-sandbox) and where the output goes (the caller's ConvertRequest).
//
// Thread-safe: no state of its own.
#ifndef CKPTSCAN_APP_CONVERT_H_
#define CKPTSCAN_APP_CONVERT_H_

#include <string_view>

#include "absl/status/status.h"
#include "ckptscan/v1/report.pb.h"
#include "trusted/output_file.h"
#include "trusted/shard_set.h"

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

// The checks every conversion's plan passes before anything is published, whoever asked: an
// output with no tensor is refused (FailedPrecondition).
absl::Status ConvertPolicy(const convert::Plan& plan);

// Runs `run` (ConvertFileJailed or ConvertFileInProcess, bound to the rules, limits and jail)
// with ConvertPolicy and makes the outcome. `rules_version` and `scanner_version` head the
// report.
ConvertOutcome Convert(const pipeline::ConvertRequest& request, const pipeline::ConvertOneFn& run,
                       std::string_view scanner_version, std::string_view rules_version);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_CONVERT_H_
