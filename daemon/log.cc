#include "daemon/log.h"

#include <unistd.h>

#include <cmath>

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

}  // namespace ckptscan::daemon
