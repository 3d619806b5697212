#include "clients/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/strings.h"
#include "base/unique_fd.h"

namespace ckptscan::clients {
namespace {

std::string Bytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    v /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(n, " B") : absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

// "42 s", "3 min 5 s", "2 h 10 min".
std::string Eta(double seconds) {
  const uint64_t s = seconds < 1 ? 1 : seconds > 1e7 ? 10000000 : static_cast<uint64_t>(seconds);
  if (s < 60) return absl::StrCat(s, " s");
  if (s < 3600) return absl::StrCat(s / 60, " min ", s % 60, " s");
  return absl::StrCat(s / 3600, " h ", s % 3600 / 60, " min");
}

// The terminal's width on stderr, 0 when unknown.
size_t TerminalColumns() {
  struct winsize ws = {};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

}  // namespace

std::string ProgressText(const std::string& label, uint64_t files_done, uint64_t files_total,
                         uint64_t bytes_done, uint64_t bytes_total, double seconds) {
  std::string out = label + ":";
  const char* sep = " ";
  if (files_total > 0) {
    absl::StrAppend(&out, sep, files_done, "/", files_total, files_total == 1 ? " file" : " files");
    sep = ", ";
  }
  if (bytes_total > 0 || bytes_done > 0) {
    absl::StrAppend(&out, sep, Bytes(bytes_done));
    if (bytes_total > 0) absl::StrAppend(&out, " of ", Bytes(bytes_total));
    out += " read";
    if (seconds > 0) {
      const double rate = static_cast<double>(bytes_done) / seconds;
      absl::StrAppend(&out, absl::StrFormat(", %.1f MB/s", rate / 1e6));
      if (seconds >= 1 && bytes_done > 0 && bytes_total > bytes_done) {
        absl::StrAppend(&out, ", ",
                        Eta(static_cast<double>(bytes_total - bytes_done) / rate), " left");
      }
    }
  }
  return out;
}

std::string FitToWidth(std::string line, size_t columns) {
  if (columns == 0 || line.size() < columns) return line;
  line.resize(columns > 1 ? columns - 1 : 0);  // the text is ASCII: one byte, one column
  return line;
}

bool ProgressMeter::ShouldDraw(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

ProgressMeter::ProgressMeter(bool draw, std::string label) : label_(std::move(label)) {
  if (draw) thread_ = std::thread([this] { Run(); });
}

ProgressMeter::~ProgressMeter() { Stop(); }

void ProgressMeter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ProgressMeter::PrintLine(std::string_view line) {
  absl::MutexLock lock(&mu_);
  (void)base::WriteAll(STDERR_FILENO,
                       absl::StrCat(drawn_ ? "\r\033[K" : "", base::AbslView(line), "\n"));
  drawn_ = false;
}

void ProgressMeter::Run() {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), kProgressInterval)) {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    // \r and "erase to the end of the line": one line, redrawn in place.
    const std::string line = absl::StrCat(
        "\r\033[K",
        FitToWidth(ProgressText(label_, files_done_.load(std::memory_order_relaxed),
                                files_total_.load(std::memory_order_relaxed),
                                bytes_done_.load(std::memory_order_relaxed),
                                bytes_total_.load(std::memory_order_relaxed), seconds),
                   TerminalColumns()));
    (void)base::WriteAll(STDERR_FILENO, line);
    drawn_ = true;
  }
  if (drawn_) (void)base::WriteAll(STDERR_FILENO, "\r\033[K");
  drawn_ = false;
}

}  // namespace ckptscan::clients
