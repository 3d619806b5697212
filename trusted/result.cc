#include "trusted/result.h"

namespace ckptscan::sandbox {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "OK";
    case Outcome::kViolation:
      return "VIOLATION";
    case Outcome::kTimeout:
      return "TIMEOUT";
    case Outcome::kSignaled:
      return "SIGNALED";
    case Outcome::kFailed:
      return "FAILED";
    case Outcome::kBadFrame:
      return "BAD_FRAME";
    case Outcome::kLimit:
      return "LIMIT";
    case Outcome::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

}  // namespace ckptscan::sandbox
