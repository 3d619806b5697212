#include "clients/progress.h"

#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
      absl::StrAppend(
          &out, absl::StrFormat(", %.1f MB/s", static_cast<double>(bytes_done) / seconds / 1e6));
    }
  }
  return out;
}

bool ProgressMeter::ShouldDraw(bool quiet) { return !quiet && ::isatty(STDERR_FILENO) == 1; }

ProgressMeter::ProgressMeter(bool draw, std::string label) : label_(std::move(label)) {
  if (draw) thread_ = std::thread([this] { Run(); });
}

ProgressMeter::~ProgressMeter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressMeter::Run() {
  const auto start = std::chrono::steady_clock::now();
  const auto interval = absl::ToChronoMilliseconds(kProgressInterval);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // \r and "erase to the end of the line": one line, redrawn in place.
    const std::string line = absl::StrCat(
        "\r\033[K", ProgressText(label_, files_done_.load(std::memory_order_relaxed),
                                 files_total_.load(std::memory_order_relaxed),
                                 bytes_done_.load(std::memory_order_relaxed),
                                 bytes_total_.load(std::memory_order_relaxed), seconds));
    (void)base::WriteAll(STDERR_FILENO, line);
    drawn_ = true;
  }
  if (drawn_) (void)base::WriteAll(STDERR_FILENO, "\r\033[K");
}

}  // namespace ckptscan::clients
