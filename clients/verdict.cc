#include "clients/verdict.h"

namespace ckptscan::clients {

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

}  // namespace ckptscan::clients
