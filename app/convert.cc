#include "app/convert.h"

#include <utility>

#include "app/report.h"
#include "trusted/judge_facts.h"

namespace ckptscan::app {

// An output holds what the input holds: a plan with no tensor at all (a pickle of plain values,
// a safetensors file with no tensor) writes nothing rather than an empty file that looks like a
// conversion. Tensors are never dropped silently: one that cannot be written fails the plan
// (core/convert), and values beside the tensors are listed in the report.
absl::Status ConvertPolicy(const convert::Plan& plan) {
  if (plan.entries.empty() && plan.aliases.empty()) {
    return absl::FailedPreconditionError("nothing to convert: the input holds no tensor");
  }
  return absl::OkStatus();
}

ConvertOutcome Convert(const pipeline::ConvertRequest& request, const pipeline::ConvertOneFn& run,
                       std::string_view scanner_version, std::string_view rules_version) {
  ConvertOutcome out;
  out.report = NewReport(scanner_version, rules_version);
  absl::StatusOr<pipeline::ConvertResult> result = run(request, ConvertPolicy);
  if (!result.ok()) {
    *out.report.add_files() = pipeline::UnreadableFileReport(request.input, result.status());
  } else {
    *out.report.add_files() = std::move(result->report);
    for (v1::FileReport& shard : result->shard_reports) *out.report.add_files() = std::move(shard);
  }
  FoldVerdict(&out.report);
  if (out.report.verdict() == v1::VERDICT_SAFE && result.ok()) {
    out.converted = result->status.ok();
    out.error = result->status;
  }
  return out;
}

}  // namespace ckptscan::app
