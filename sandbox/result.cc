#include "sandbox/result.h"

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

namespace {

constexpr JailLimit kJailLimits[] = {JailLimit::kWorkerMemory, JailLimit::kFileSize,
                                     JailLimit::kMaxFrameBytes, JailLimit::kMaxFrameValues,
                                     JailLimit::kFactsMemory};

}  // namespace

std::string_view JailLimitName(JailLimit limit) {
  switch (limit) {
    case JailLimit::kNone:
      return "";
    case JailLimit::kWorkerMemory:
      return "worker_memory";
    case JailLimit::kFileSize:
      return "file_size";
    case JailLimit::kMaxFrameBytes:
      return "max_frame_bytes";
    case JailLimit::kMaxFrameValues:
      return "max_frame_values";
    case JailLimit::kFactsMemory:
      return "facts_memory";
  }
  return "";
}

std::optional<JailLimit> JailLimitNamed(std::string_view name) {
  for (JailLimit limit : kJailLimits) {
    if (JailLimitName(limit) == name) return limit;
  }
  return std::nullopt;
}

}  // namespace ckptscan::sandbox
