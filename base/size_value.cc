#include "base/size_value.h"

#include "base/checked.h"

namespace ckptscan::base {

absl::StatusOr<uint64_t> ParseSize(std::string_view text) {
  uint64_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
        multiplier = uint64_t{1} << 10;
        break;
      case 'M':
        multiplier = uint64_t{1} << 20;
        break;
      case 'G':
        multiplier = uint64_t{1} << 30;
        break;
      case 'T':
        multiplier = uint64_t{1} << 40;
        break;
      default:
        break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  if (text.empty()) return absl::InvalidArgumentError("missing number");
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(
          "not a decimal integer (optional suffix K, M, G, T)");
    }
    if (!CheckedMul<uint64_t>(value, 10, &value) ||
        !CheckedAdd<uint64_t>(value, static_cast<uint64_t>(c - '0'),
                                    &value)) {
      return absl::InvalidArgumentError("number too large");
    }
  }
  if (!CheckedMul(value, multiplier, &value)) {
    return absl::InvalidArgumentError("number too large");
  }
  return value;
}

}  // namespace ckptscan::base
