// Verdict and severity names and the CLI's exit codes (docs/report.md,
// "Verdicts").
//
//   return app::ExitCodeFor(report.verdict());
#ifndef CKPTSCAN_APP_VERDICT_H_
#define CKPTSCAN_APP_VERDICT_H_

#include <optional>
#include <string>
#include <string_view>

#include "ckptscan/v1/report.pb.h"

namespace ckptscan::app {

inline constexpr int kExitSafe = 0;      // every file SAFE
inline constexpr int kExitFindings = 1;  // worst verdict SUSPICIOUS or DANGEROUS
inline constexpr int kExitError = 2;     // worst verdict ERROR: something could not be verified
inline constexpr int kExitUsage = 64;    // bad command line or rules file (sysexits EX_USAGE)

// "SAFE", "SUSPICIOUS", "DANGEROUS", "ERROR"; "UNSPECIFIED" for anything else.
std::string_view VerdictName(v1::Verdict verdict);
// "INFO", "LOW", "MEDIUM", "HIGH", "CRITICAL"; "UNSPECIFIED" for anything else.
std::string_view SeverityName(v1::Severity severity);
// A report error code's name in reports: the lowercase of its enum name after "ERROR_CODE_"
// (ERROR_CODE_MISSING_SHARD -> "missing_shard"); "unspecified" for 0 or an unknown value.
// The proto enum is the only table: clients/python/ckptscan_client/report.py derives the
// same names from it.
std::string ErrorCodeName(v1::ErrorCode code);
// The code ErrorCodeName names; nullopt for any other text (and for "unspecified").
std::optional<v1::ErrorCode> ParseErrorCode(std::string_view name);
// SAFE 0, SUSPICIOUS and DANGEROUS 1, ERROR 2. An unspecified or unknown
// verdict is 2: what could not be judged is never reported as safe.
int ExitCodeFor(v1::Verdict verdict);

// `scan --fail-on`: the least verdict that fails a scan with exit 1.
enum class FailOn { kSuspicious, kDangerous };

// The exit code of a whole report under `fail_on`: the worst file verdict, where
// with kDangerous a SUSPICIOUS file counts as passing (SAFE). So kDangerous turns
// a SUSPICIOUS-only report into 0, but an ERROR file still exits 2 (1 if another
// file is DANGEROUS). No files: 2.
int ExitCodeFor(const v1::Report& report, FailOn fail_on);

// Whether one file's verdict fails the scan under `fail_on` (ERROR always does).
bool Fails(v1::Verdict verdict, FailOn fail_on);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_VERDICT_H_
