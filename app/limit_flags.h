// `--limit NAME=VALUE`: every pickle::Limits field and every format limit of the worker
// (core/formats/format_limits.h) by name, for the CLI and the daemon. The names are the ones
// limit errors print ("[limit max_compression_ratio=200]"), unique across both tables.
//
// VALUE is a decimal integer, optionally followed by K, M, G or T (binary
// multiples: 4G is 4 * 2^30). Unknown names, malformed or out-of-range values
// are InvalidArgument (a usage error). Thread-safe: the table is constant.
//
//   CKPT_ASSIGN_OR_RETURN(app::LimitSettings limits,
//   app::ParseLimitFlags({"max_opcodes=1000", "max_compression_ratio=1000"}));
#ifndef CKPTSCAN_APP_LIMIT_FLAGS_H_
#define CKPTSCAN_APP_LIMIT_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/formats/format_limits.h"
#include "core/pickle/limits.h"

namespace ckptscan::app {

struct LimitFlag {
  std::string_view name;  // as limit errors print it
  std::string_view help;
  uint64_t default_value;
  uint64_t max_value;  // largest value the field holds
};

// What --limit sets: the pickle VM's limits, and the format limits set away from their
// defaults (in the order first given; the job carries them to the worker).
struct LimitSettings {
  pickle::Limits vm;
  formats::FormatLimitSettings format;
};

// Every settable limit: pickle::Limits in declaration order, then formats::FormatLimits().
const std::vector<LimitFlag>& LimitFlags();

// Every settable limit with the value `limits` gives it, in LimitFlags() order: what a scan
// ran under (a scan attestation records it).
struct LimitInForce {
  std::string_view name;
  uint64_t value;
};
std::vector<LimitInForce> LimitsInForce(const pickle::Limits& vm,
                                        const formats::FormatLimitSettings& format);

// Applies one "NAME=VALUE" to `limits`.
[[nodiscard]] absl::Status ApplyLimitFlag(std::string_view spec, LimitSettings* limits);

// Defaults with every spec applied in order (a later spec for the same name
// wins).
absl::StatusOr<LimitSettings> ParseLimitFlags(const std::vector<std::string>& specs);

// A VALUE as --limit takes it (decimal, optional K/M/G/T suffix), for other
// size flags (--worker-memory). InvalidArgument when malformed or too large.
absl::StatusOr<uint64_t> ParseSizeValue(std::string_view text);

// One line per limit: "  name  default N  help", for --help.
std::string LimitFlagsHelp();

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_LIMIT_FLAGS_H_
