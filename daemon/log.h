// The daemon's log: one JSON object per line on stderr, one line per job and per admin action
// (docs/daemon.md lists the fields). Strings that come from callers or files (upload names,
// paths, error messages) are escaped to printable UTF-8 (base::Escaped, invisible characters
// too) and cut at kMaxLogString bytes, so a file name can neither forge a line nor flood the log.
//
// Thread-safe: a line is assembled first and written with one write(2).
//
//   LogLine("job").Str("rpc", "ScanUpload").Str("caller", "uid:1000").Num("ms", 12.5).Emit();
#ifndef CKPTSCAN_DAEMON_LOG_H_
#define CKPTSCAN_DAEMON_LOG_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace ckptscan::daemon {

inline constexpr size_t kMaxLogString = 512;

// The trace id of a W3C trace-context `traceparent` value ("00-<32 hex>-<16 hex>-<2 hex>"), or
// "" when it is malformed (the caller's text is never logged as given).
std::string TraceIdOf(std::string_view traceparent);

class LogLine final {
 public:
  explicit LogLine(std::string_view event, std::string_view level = "info");
  LogLine& Str(std::string_view key, std::string_view value);
  LogLine& Num(std::string_view key, double value);
  LogLine& Int(std::string_view key, uint64_t value);
  LogLine& Bool(std::string_view key, bool value);
  // Writes the line to stderr (and returns it, for tests).
  std::string Emit();

 private:
  void Key(std::string_view key);
  std::string line_;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_LOG_H_
