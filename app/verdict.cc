#include "app/verdict.h"

#include <cctype>

namespace ckptscan::app {

std::string_view VerdictName(v1::Verdict verdict) {
  switch (verdict) {
    case v1::VERDICT_SAFE:
      return "SAFE";
    case v1::VERDICT_SUSPICIOUS:
      return "SUSPICIOUS";
    case v1::VERDICT_DANGEROUS:
      return "DANGEROUS";
    case v1::VERDICT_ERROR:
      return "ERROR";
    default:
      return "UNSPECIFIED";
  }
}

std::string_view SeverityName(v1::Severity severity) {
  switch (severity) {
    case v1::SEVERITY_INFO:
      return "INFO";
    case v1::SEVERITY_LOW:
      return "LOW";
    case v1::SEVERITY_MEDIUM:
      return "MEDIUM";
    case v1::SEVERITY_HIGH:
      return "HIGH";
    case v1::SEVERITY_CRITICAL:
      return "CRITICAL";
    default:
      return "UNSPECIFIED";
  }
}

namespace {
constexpr std::string_view kErrorCodePrefix = "ERROR_CODE_";
}  // namespace

std::string ErrorCodeName(v1::ErrorCode code) {
  if (code == v1::ERROR_CODE_UNSPECIFIED || !v1::ErrorCode_IsValid(code)) return "unspecified";
  std::string name = v1::ErrorCode_Name(code).substr(kErrorCodePrefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::optional<v1::ErrorCode> ParseErrorCode(std::string_view name) {
  std::string full(kErrorCodePrefix);
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c))) return std::nullopt;
    full += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  v1::ErrorCode code;
  if (!v1::ErrorCode_Parse(full, &code) || code == v1::ERROR_CODE_UNSPECIFIED) return std::nullopt;
  return code;
}

int ExitCodeFor(v1::Verdict verdict) {
  switch (verdict) {
    case v1::VERDICT_SAFE:
      return kExitSafe;
    case v1::VERDICT_SUSPICIOUS:
    case v1::VERDICT_DANGEROUS:
      return kExitFindings;
    default:
      return kExitError;
  }
}

bool Fails(v1::Verdict verdict, FailOn fail_on) {
  if (verdict == v1::VERDICT_SAFE) return false;
  return !(verdict == v1::VERDICT_SUSPICIOUS && fail_on == FailOn::kDangerous);
}

int ExitCodeFor(const v1::Report& report, FailOn fail_on) {
  if (report.files_size() == 0) return kExitError;
  // DANGEROUS > SUSPICIOUS > ERROR > SAFE (findings win over errors), as the report's verdict.
  bool dangerous = false;
  bool suspicious = false;
  bool error = false;
  for (const v1::FileReport& f : report.files()) {
    switch (f.verdict()) {
      case v1::VERDICT_SAFE:
        break;
      case v1::VERDICT_DANGEROUS:
        dangerous = true;
        break;
      case v1::VERDICT_SUSPICIOUS:
        suspicious = suspicious || fail_on == FailOn::kSuspicious;
        // Not parsed whole (a limit, a malformed stream, a file that changed): what follows
        // the error was never judged, so --fail-on dangerous must not let it pass.
        error = error || f.errors_size() > 0;
        break;
      default:  // ERROR, and anything unspecified: never passes
        error = true;
        break;
    }
  }
  if (dangerous || suspicious) return kExitFindings;
  return error ? kExitError : kExitSafe;
}

}  // namespace ckptscan::app
