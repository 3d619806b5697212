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
  for (const v1::FileReport& f : report->files()) worst = rules::WorseVerdict(worst, f.verdict());
  report->set_verdict(worst);
}

void AddError(v1::FileReport* file, v1::ErrorCode code, std::string message) {
  v1::ScanError* e = file->add_errors();
  e->set_code(code);
  e->set_message(std::move(message));
  file->set_verdict(rules::WorseVerdict(file->verdict(), v1::VERDICT_ERROR));
}

}  // namespace ckptscan::app
