// The format limits (format_limits.h) applied to, and read from, a ReadOptions: the worker's
// side of `--limit NAME=VALUE`. Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_FORMATS_READ_OPTIONS_LIMITS_H_
#define CKPTSCAN_CORE_FORMATS_READ_OPTIONS_LIMITS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/formats/format_limits.h"
#include "core/formats/read_file.h"

namespace ckptscan::formats {

// The limit's value in `options`.
uint64_t GetFormatLimit(const ReadOptions& options, FormatLimit limit);

// Sets it; InvalidArgument over the limit's max_value.
[[nodiscard]] absl::Status SetFormatLimit(FormatLimit limit, uint64_t value, ReadOptions* options);

// By name, as the job carries it: InvalidArgument for an unknown name or a value out of range.
[[nodiscard]] absl::Status SetFormatLimit(std::string_view name, uint64_t value,
                                          ReadOptions* options);

}  // namespace ckptscan::formats

#endif  // CKPTSCAN_CORE_FORMATS_READ_OPTIONS_LIMITS_H_
