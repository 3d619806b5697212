#include "app/convert.h"

#include <utility>

#include "app/report.h"
#include "core/safetensors/validator.h"
#include "pipeline/judge_facts.h"

namespace ckptscan::app {

// A safetensors input is SAFE to scan but has nothing to convert (its facts carry no tensor
// list): refused rather than written as an empty file. The plan's header is this process's own
// (built from the judged facts), read back with the validator for its provenance.
absl::Status ConvertPolicy(const convert::Plan& plan) {
  absl::StatusOr<safetensors::Layout> layout = safetensors::ValidateHeader(
      plan.header.bytes, plan.header.file_size, safetensors::ValidatorLimits{});
  if (!layout.ok()) return layout.status();
  const auto source = layout->metadata.find("ckptscan.source_format");
  if (source != layout->metadata.end() && source->second == "safetensors") {
    return absl::FailedPreconditionError(
        "the input is already a safetensors file (it passed the strict validator): nothing to "
        "convert");
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
