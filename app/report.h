// The one way a report is started, an error added and a verdict folded, for every surface (the
// CLI, local or --server, and ckptscand's services): the same files give the same report.
//
//   v1::Report report = app::NewReport(version, rules->version());
//   ... files ...
//   app::FoldVerdict(&report);
#ifndef CKPTSCAN_APP_REPORT_H_
#define CKPTSCAN_APP_REPORT_H_

#include <string>
#include <string_view>

#include "ckptscan/v1/report.pb.h"

namespace ckptscan::app {

// A report with no file yet: the schema and both versions set.
v1::Report NewReport(std::string_view scanner_version, std::string_view rules_version);

// The report's verdict: the worst of its files' verdicts. No file at all is nothing verified:
// ERROR, never SAFE. Also fills the summary (counts per verdict and kind, files skipped).
void FoldVerdict(v1::Report* report);

// Adds an error to `file` and makes its verdict at least ERROR (findings keep a worse one).
void AddError(v1::FileReport* file, v1::ErrorCode code, std::string message);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_REPORT_H_
