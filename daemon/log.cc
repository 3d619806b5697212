#include "daemon/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/escape.h"
#include "base/json_text.h"
#include "base/unique_fd.h"

namespace ckptscan::daemon {

std::string TraceIdOf(std::string_view v) {
  if (v.size() != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return "";
  auto hex = [](std::string_view s) {
    for (char c : s) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
  };
  const std::string_view version = v.substr(0, 2), trace = v.substr(3, 32);
  if (!hex(version) || version == "ff" || !hex(trace) || !hex(v.substr(36, 16)) ||
      !hex(v.substr(53, 2)) || trace == std::string_view("00000000000000000000000000000000")) {
    return "";
  }
  return std::string(trace);
}

LogLine::LogLine(std::string_view event, std::string_view level) {
  line_ = "{\"time\":\"";
  line_ += absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  line_ += "\"";
  Str("level", level);
  Str("event", event);
}

void LogLine::Key(std::string_view key) {
  line_ += ',';
  base::AppendJsonString(&line_, key);
  line_ += ':';
}

LogLine& LogLine::Str(std::string_view key, std::string_view value) {
  Key(key);
  std::string safe = base::Escaped(value, {.escape_backslash = true, .escape_invisible = true});
  if (safe.size() > kMaxLogString) {
    // Cut at a character boundary (Escaped's output is valid UTF-8).
    size_t cut = kMaxLogString;
    while (cut > 0 && (static_cast<unsigned char>(safe[cut]) & 0xC0) == 0x80) --cut;
    safe.resize(cut);
    safe += "...";
  }
  base::AppendJsonString(&line_, safe);
  return *this;
}

LogLine& LogLine::Num(std::string_view key, double value) {
  Key(key);
  line_ += std::isfinite(value) ? absl::StrFormat("%.3f", value) : std::string("null");
  return *this;
}

LogLine& LogLine::Int(std::string_view key, uint64_t value) {
  Key(key);
  absl::StrAppend(&line_, value);
  return *this;
}

LogLine& LogLine::Bool(std::string_view key, bool value) {
  Key(key);
  line_ += value ? "true" : "false";
  return *this;
}

std::string LogLine::Emit() {
  std::string out = line_ + "}\n";
  (void)base::WriteAll(STDERR_FILENO, out);
  return out;
}

// --- LogLimiter ---------------------------------------------------------------------------

namespace {

constexpr std::string_view kOthers = "others";

}  // namespace

LogLimiter::LogLimiter(LogRateLimits limits) : limits_(limits), thread_([this] { Loop(); }) {}

LogLimiter::~LogLimiter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;  // Loop's condition: re-evaluated when mu_ is released
  }
  thread_.join();
  (void)Report(absl::InfiniteFuture());
}

void LogLimiter::Refill(Bucket* b, absl::Time now) const {
  if (now <= b->refilled) return;
  const double add = absl::ToDoubleSeconds(now - b->refilled) * limits_.lines_per_second;
  b->tokens = std::min<double>(limits_.burst, b->tokens + add);
  b->refilled = now;
}

bool LogLimiter::Admit(std::string_view caller) { return Admit(caller, absl::Now()); }

bool LogLimiter::Admit(std::string_view caller, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(caller);
  if (it == buckets_.end()) {
    if (buckets_.size() >= limits_.max_callers) {
      // Forget callers whose bucket has refilled and who have nothing to report: a new bucket
      // would hold the same.
      for (auto j = buckets_.begin(); j != buckets_.end();) {
        Refill(&j->second, now);
        const bool idle = j->second.suppressed == 0 && j->second.tokens >= limits_.burst;
        j = idle ? buckets_.erase(j) : std::next(j);
      }
    }
    if (buckets_.size() >= limits_.max_callers) caller = kOthers;
    it = buckets_.find(caller);
    if (it == buckets_.end()) {
      it = buckets_.emplace(std::string(caller), Bucket{double(limits_.burst), now, 0, now}).first;
    }
  }
  Bucket& b = it->second;
  Refill(&b, now);
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  if (b.suppressed++ == 0) {
    b.first_suppressed = now;
    ++pending_;
  }
  return false;
}

std::string LogLimiter::Report(absl::Time now) {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (auto& [caller, b] : buckets_) {
    if (b.suppressed == 0 || now - b.first_suppressed < limits_.report_every) continue;
    out += LogLine("log_suppressed", "warning")
               .Str("caller", caller)
               .Int("suppressed", b.suppressed)
               .Num("seconds", absl::ToDoubleSeconds(std::min(now, absl::Now()) -
                                                      b.first_suppressed))
               .Num("lines_per_second", limits_.lines_per_second)
               .Int("burst", limits_.burst)
               .Emit();
    b.suppressed = 0;
    --pending_;
  }
  return out;
}

size_t LogLimiter::callers() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

size_t LogLimiter::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

void LogLimiter::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Asleep while nothing is left out; then one report per period.
      mu_.Await(absl::Condition(
          +[](LogLimiter* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) {
            return l->stop_ || l->pending_ > 0;
          },
          this));
      if (stop_) return;
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), limits_.report_every)) return;
    }
    (void)Report(absl::Now());
  }
}

namespace {

std::atomic<LogLimiter*> library_limiter{nullptr};

}  // namespace

void SetLibraryLogLimiter(LogLimiter* limiter) { library_limiter.store(limiter); }
LogLimiter* LibraryLogLimiter() { return library_limiter.load(); }

}  // namespace ckptscan::daemon
