// `--limit NAME=VALUE`: every pickle::Limits field by name, for the CLI.
//
// VALUE is a decimal integer, optionally followed by K, M, G or T (binary
// multiples: 4G is 4 * 2^30). Unknown names, malformed or out-of-range values
// are InvalidArgument (a usage error). Thread-safe: the table is constant.
//
//   CKPT_ASSIGN_OR_RETURN(pickle::Limits limits,
//   app::ParseLimitFlags({"max_opcodes=1000"}));
#ifndef CKPTSCAN_APP_LIMIT_FLAGS_H_
#define CKPTSCAN_APP_LIMIT_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/pickle/limits.h"

namespace ckptscan::app {

struct LimitFlag {
  std::string_view name;  // the pickle::Limits field name
  std::string_view help;
  uint64_t default_value;
  uint64_t max_value;  // largest value the field holds
};

// Every settable limit, in pickle::Limits declaration order.
const std::vector<LimitFlag>& LimitFlags();

// Applies one "NAME=VALUE" to `limits`.
[[nodiscard]] absl::Status ApplyLimitFlag(std::string_view spec, pickle::Limits* limits);

// Defaults with every spec applied in order (a later spec for the same name
// wins).
absl::StatusOr<pickle::Limits> ParseLimitFlags(const std::vector<std::string>& specs);

// A VALUE as --limit takes it (decimal, optional K/M/G/T suffix), for other
// size flags (--worker-memory). InvalidArgument when malformed or too large.
absl::StatusOr<uint64_t> ParseSizeValue(std::string_view text);

// One line per limit: "  name  (default N)  help", for --help.
std::string LimitFlagsHelp();

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_LIMIT_FLAGS_H_
