#include "sandbox/facts_budget.h"

#include <malloc.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/limit_status.h"

namespace ckptscan::sandbox {

uint64_t EstimateDecodeBytes(uint64_t payload_bytes, uint64_t values) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (values > (kMax - payload_bytes) / kDecodedBytesPerValue) return kMax;
  return payload_bytes + values * kDecodedBytesPerValue;
}

FactsBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

FactsBudget::Reservation& FactsBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void FactsBudget::Reservation::Release() {
  if (budget_ == nullptr) return;
  std::exchange(budget_, nullptr)->Return(std::exchange(bytes_, 0));
}

void FactsBudget::Return(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    in_use_ -= bytes;
  }
  freed_.SignalAll();
  // The facts this reserved are freed by now (a reservation outlives them); without a trim
  // glibc keeps most of a big decode resident (its chunks sit below the mmap threshold).
  if (bytes >= kTrimBytes) ::malloc_trim(0);
}

absl::StatusOr<FactsBudget::Reservation> FactsBudget::Reserve(
    uint64_t bytes, absl::Time deadline, const std::function<bool()>& cancelled) {
  if (bytes > total_) {
    return base::LimitError(
        absl::StrCat("decoding this result needs an estimated ", bytes,
                     " bytes of the daemon's memory; the budget for all jobs is ", total_,
                     " (facts_memory)"),
        "facts_memory", total_);
  }
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  while (total_ - in_use_ < bytes) {
    if (cancelled && cancelled()) {
      return absl::CancelledError("the job was cancelled while waiting for decode memory");
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return base::LimitError(
          absl::StrCat("decoding this result needs an estimated ", bytes,
                       " bytes; other jobs held ", in_use_, " of the ", total_,
                       "-byte budget (facts_memory) for ",
                       absl::FormatDuration(absl::Trunc(now - start, absl::Milliseconds(1)))),
          "facts_memory", total_);
    }
    const absl::Duration wait = std::min(deadline - now, absl::Milliseconds(50));
    freed_.WaitWithTimeout(&mu_, wait + absl::Milliseconds(1));
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return Reservation(this, bytes);
}

uint64_t FactsBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

uint64_t FactsBudget::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

}  // namespace ckptscan::sandbox
