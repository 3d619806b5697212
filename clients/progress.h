// A progress line on a terminal for long scans and conversions: files done of those found, and
// the bytes read for digests (hashing is what makes a big file take seconds), with the rate.
//
// Drawn on stderr, every kProgressInterval, only when stderr is a terminal and --quiet was not
// given (never in CI logs, pipes or files), after a first interval has passed (a quick scan
// draws nothing), and erased when the meter ends, so the report that follows is untouched.
//
// Thread-safe: the counters are atomics (several scanning threads add to them); one drawing
// thread per meter.
//
//   ProgressMeter meter(ProgressMeter::ShouldDraw(quiet), "scan");
//   jail.bytes_read = meter.bytes();
//   ... meter.AddFiles(n); ... meter.FileDone(); ...
#ifndef CKPTSCAN_CLIENTS_PROGRESS_H_
#define CKPTSCAN_CLIENTS_PROGRESS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckptscan::clients {

inline constexpr absl::Duration kProgressInterval = absl::Milliseconds(250);

// One line of progress, without the terminal's control characters: e.g.
// "scan: 3/120 files, 512.0 MiB of 1.2 GiB read, 1.1 GB/s, 1 s left". Parts with a zero total
// are left out; `seconds` <= 0 leaves the rate out; the time left is given once a second has
// passed and some bytes of a known total are read.
std::string ProgressText(const std::string& label, uint64_t files_done, uint64_t files_total,
                         uint64_t bytes_done, uint64_t bytes_total, double seconds);

// `line` cut to fit a terminal of `columns` columns (one column kept free, so the cursor never
// wraps to a second line that "\r" could not erase); 0 columns (unknown) leaves it whole.
std::string FitToWidth(std::string line, size_t columns);

class ProgressMeter final {
 public:
  // Whether a meter should draw: stderr is a terminal and the user did not ask for --quiet.
  static bool ShouldDraw(bool quiet);

  ProgressMeter(bool draw, std::string label);
  ~ProgressMeter();  // Stop()
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void AddFiles(uint64_t n) { files_total_.fetch_add(n, std::memory_order_relaxed); }
  void FileDone() { files_done_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytesTotal(uint64_t n) { bytes_total_.fetch_add(n, std::memory_order_relaxed); }
  // Where readers add the bytes they read (JailOptions::bytes_read).
  std::atomic<uint64_t>* bytes() { return &bytes_done_; }

  // `line` and a newline on stderr, from any thread: the progress line is erased first and
  // drawn again at its next interval, so the two never share a line.
  void PrintLine(std::string_view line) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops drawing and erases the line; call it before writing what follows on the terminal
  // (the report). Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string label_;
  std::atomic<uint64_t> files_done_{0};
  std::atomic<uint64_t> files_total_{0};
  std::atomic<uint64_t> bytes_done_{0};
  std::atomic<uint64_t> bytes_total_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool drawn_ ABSL_GUARDED_BY(mu_) = false;  // a progress line is on the terminal now
  std::thread thread_;
};

}  // namespace ckptscan::clients

#endif  // CKPTSCAN_CLIENTS_PROGRESS_H_
