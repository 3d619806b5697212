// Sizes as people write them on command lines and in config files: a decimal integer with an
// optional binary suffix K, M, G or T ("8G" = 8 << 30). Overflow-checked.
#ifndef CKPTSCAN_BASE_SIZE_VALUE_H_
#define CKPTSCAN_BASE_SIZE_VALUE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckptscan::base {

absl::StatusOr<uint64_t> ParseSize(std::string_view text);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_SIZE_VALUE_H_
