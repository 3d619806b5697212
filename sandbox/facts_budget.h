// The trusted side's memory for decoded worker results, bounded across concurrent jobs.
//
// A worker's frame is at most a few tens of MiB, but decoding it costs far more: every value
// (graph node, global, call site, member, ...) becomes a protobuf message and then a struct of
// its own, ~400 bytes from as little as 2 bytes on the wire. pickle.dumps(list(range(3_000_000)))
// is a 15 MB honest file whose ~57 MB frame decodes to ~1.2 GB; two at once doubled a daemon's
// memory. A FactsBudget is the daemon-wide cap (ckptscand --facts-memory): before a frame is
// parsed, the job reserves its estimate (EstimateDecodeBytes: the payload plus
// kDecodedBytesPerValue per value counted on the wire) and holds it until its facts are freed.
// A job whose estimate is over the whole budget fails at once (limit "facts_memory"); one that
// does not fit beside the jobs decoding now waits for them, up to its deadline.
//
// When a reservation of at least kTrimBytes is released, the heap is trimmed (malloc_trim), so
// a big job's memory goes back to the system instead of staying resident in the allocator.
//
// Thread-safe.
//
//   FactsBudget budget(2ull << 30);
//   absl::StatusOr<FactsBudget::Reservation> r = budget.Reserve(bytes, deadline, cancelled);
#ifndef CKPTSCAN_SANDBOX_FACTS_BUDGET_H_
#define CKPTSCAN_SANDBOX_FACTS_BUDGET_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckptscan::sandbox {

// What one decoded value costs the trusted side, measured: a 3,000,000-int list (3,000,003
// values, a 57 MB payload) peaks at ~1.2 GB in the daemon during its decode and judging.
inline constexpr uint64_t kDecodedBytesPerValue = 400;

// The memory a payload of `payload_bytes` holding `values` values costs to decode and judge.
uint64_t EstimateDecodeBytes(uint64_t payload_bytes, uint64_t values);

class FactsBudget final {
 public:
  // Released reservations at least this large trim the heap.
  static constexpr uint64_t kTrimBytes = 64ull << 20;

  // Holds `bytes` of the budget until destroyed (or moved from).
  class Reservation final {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { Release(); }

    uint64_t bytes() const { return bytes_; }

   private:
    friend class FactsBudget;
    Reservation(FactsBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    void Release();

    FactsBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  explicit FactsBudget(uint64_t total_bytes) : total_(total_bytes) {}
  FactsBudget(const FactsBudget&) = delete;
  FactsBudget& operator=(const FactsBudget&) = delete;

  // ResourceExhausted at once when `bytes` is over the whole budget. Otherwise waits until it
  // fits beside the reservations held: ResourceExhausted if it still does not at `deadline`,
  // Cancelled when `cancelled` (may be empty; polled every 50 ms) returns true.
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::Time deadline,
                                      const std::function<bool()>& cancelled);

  uint64_t total() const { return total_; }
  uint64_t in_use() const;
  // The most that was ever reserved at once (for tests and metrics).
  uint64_t peak() const;

 private:
  void Return(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  const uint64_t total_;
  mutable absl::Mutex mu_;
  absl::CondVar freed_;  // Return gave bytes back
  uint64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_FACTS_BUDGET_H_
