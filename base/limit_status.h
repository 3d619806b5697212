// A ResourceExhausted status that names the limit it hit, so that whoever turns it into a
// report error (ScanError.limit_name / limit_value) reads the name from the status instead
// of parsing its message. The name travels as a status payload; the message is unchanged.
#ifndef CKPTSCAN_BASE_LIMIT_STATUS_H_
#define CKPTSCAN_BASE_LIMIT_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ckptscan::base {

struct LimitHit {
  std::string name;    // the Limits field, e.g. "max_entries"
  uint64_t value = 0;  // its configured value
};

// ResourceExhausted with `message`, naming `limit` = `value`.
absl::Status LimitError(std::string_view message, std::string_view limit, uint64_t value);

// The limit a status from LimitError names; nullopt for any other status.
std::optional<LimitHit> LimitOf(const absl::Status& status);

// `status` with its message replaced by `message`: the same code and payloads, so that a
// limit it names (LimitError) survives a caller that adds context to the message.
absl::Status Reworded(const absl::Status& status, std::string_view message);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_LIMIT_STATUS_H_
