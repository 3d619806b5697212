#include "app/report.h"

#include <utility>

#include "app/report_format.h"
#include "rules/rule_set.h"

namespace ckptscan::app {

v1::Report NewReport(std::string_view scanner_version, std::string_view rules_version) {
  v1::Report report;
  report.set_schema(std::string(kReportSchema));
  report.set_scanner_version(std::string(scanner_version));
  report.set_rules_version(std::string(rules_version));
  return report;
}

void FoldVerdict(v1::Report* report) {
  v1::Verdict worst = report->files_size() == 0 ? v1::VERDICT_ERROR : v1::VERDICT_SAFE;
  v1::Summary* summary = report->mutable_summary();
  summary->Clear();
  for (const v1::FileReport& f : report->files()) {
    worst = rules::WorseVerdict(worst, f.verdict());
    switch (f.verdict()) {
      case v1::VERDICT_SAFE:
        summary->set_safe(summary->safe() + 1);
        break;
      case v1::VERDICT_SUSPICIOUS:
        summary->set_suspicious(summary->suspicious() + 1);
        break;
      case v1::VERDICT_DANGEROUS:
        summary->set_dangerous(summary->dangerous() + 1);
        break;
      default:
        summary->set_error(summary->error() + 1);
        break;
    }
    // A file that was never read to the end (unreadable, a worker that failed) has no kind.
    const std::string kind = f.kind().empty() ? "unverified" : f.kind();
    (*summary->mutable_kinds())[kind] += 1;
  }
  summary->set_files(static_cast<uint32_t>(report->files_size()));
  summary->set_skipped(static_cast<uint32_t>(report->skipped_size()));
  report->set_verdict(worst);
}

void AddError(v1::FileReport* file, v1::ErrorCode code, std::string message) {
  v1::ScanError* e = file->add_errors();
  e->set_code(code);
  e->set_message(std::move(message));
  file->set_verdict(rules::WorseVerdict(file->verdict(), v1::VERDICT_ERROR));
}

}  // namespace ckptscan::app
