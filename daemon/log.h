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
#include <map>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

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

// How many lines one caller's calls may add to the log (ckptscand --log-lines-per-second,
// --log-burst): a token bucket per caller.
struct LogRateLimits {
  double lines_per_second = 10;
  uint32_t burst = 100;
  // Callers remembered at once; past it those whose bucket is full and who have nothing
  // suppressed are forgotten first (a full bucket is what a new caller starts with), then the
  // line is charged to one shared bucket, "others".
  size_t max_callers = 4096;
  // How often the lines left out are reported (one "log_suppressed" line per caller).
  absl::Duration report_every = absl::Seconds(1);
};

// Keeps one caller (a uid, a certificate, a peer) from flooding the log: a caller's calls that
// are refused at once (Admin from a non-admin, a path from a uid that may not name one) cost it
// little and cost the log a line each, 8,500 a second from one client. Each line a caller causes
// asks Admit() first; past its bucket the line is left out and counted, and a thread of the
// limiter's own writes, at most once per report_every, one line per caller saying how many were
// left out since the last one ("log_suppressed": caller, suppressed, seconds).
//
// Thread-safe. The thread sleeps while nothing is suppressed.
//
//   LogLimiter limiter({});
//   if (limiter.Admit(caller.name)) LogLine("admin").Str("caller", caller.name).Emit();
class LogLimiter final {
 public:
  explicit LogLimiter(LogRateLimits limits);
  ~LogLimiter();  // writes what is still suppressed
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // Whether a line for `caller` may be written now (counted as left out when not); the second
  // form at a given time (tests).
  bool Admit(std::string_view caller) ABSL_LOCKS_EXCLUDED(mu_);
  bool Admit(std::string_view caller, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Writes the report lines due at `now` and returns them (tests; the thread calls it).
  std::string Report(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Callers remembered now, and of them those with lines left out not reported yet (tests).
  size_t callers() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t pending() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
    uint64_t suppressed = 0;
    absl::Time first_suppressed;
  };
  void Refill(Bucket* b, absl::Time now) const;
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const LogRateLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, Bucket, std::less<>> buckets_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // callers with lines left out, not reported yet
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest exists
};

// The limiter for lines the libraries write (gRPC's, protobuf's: a request a caller shaped can
// make them log), all under the caller "library". Null until set; not owned.
void SetLibraryLogLimiter(LogLimiter* limiter);
LogLimiter* LibraryLogLimiter();

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_LOG_H_
