// Bounded concurrency for the daemon's jobs (issue 7): at most `max_running` workers at once and
// at most `max_queued` jobs waiting for one. A job past both is refused at once with
// RESOURCE_EXHAUSTED (the caller retries elsewhere or later) rather than piling up; after Drain()
// every new job is refused with UNAVAILABLE while admitted ones finish.
//
// A job is admitted first (Admit: it counts as queued, e.g. while its upload streams in) and runs
// once it gets a slot (Ticket::Run, which waits, polling the caller's cancellation). Slots are
// handed out first come, first served: a freed slot goes straight to the oldest waiter, and only
// that waiter is woken (no thundering herd, no queue jumping). The ticket gives its place back
// when destroyed.
//
// Thread-safe.
//
//   CKPT_ASSIGN_OR_RETURN(JobSlots::Ticket t, slots.Admit());
//   CKPT_RETURN_IF_ERROR(t.Run([&] { return ctx->IsCancelled(); }));
//   ... run the worker ...
#ifndef CKPTSCAN_DAEMON_JOB_SLOTS_H_
#define CKPTSCAN_DAEMON_JOB_SLOTS_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::daemon {

class JobSlots final {
 public:
  JobSlots(uint32_t max_running, uint32_t max_queued)
      : max_running_(max_running), max_queued_(max_queued) {}

  class Ticket final {
   public:
    Ticket(Ticket&& other) noexcept : slots_(other.slots_), running_(other.running_) {
      other.slots_ = nullptr;
    }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

    // Waits for a running slot. Cancelled (polled every 50 ms) returns CANCELLED and leaves
    // the queue.
    absl::Status Run(const std::function<bool()>& cancelled);

   private:
    friend class JobSlots;
    explicit Ticket(JobSlots* slots) : slots_(slots) {}
    JobSlots* slots_;
    bool running_ = false;
  };

  // RESOURCE_EXHAUSTED when max_running + max_queued jobs are admitted; UNAVAILABLE after Drain.
  absl::StatusOr<Ticket> Admit();

  // No new job from now on.
  void Drain();
  // Waits until no admitted job is left or `deadline_ms` milliseconds passed; true if none is.
  bool WaitIdle(int64_t deadline_ms);

  struct Counts {
    uint32_t running = 0;
    uint32_t queued = 0;
    uint64_t refused = 0;
    bool draining = false;
  };
  Counts counts() const;
  uint32_t max_running() const { return max_running_; }
  uint32_t max_queued() const { return max_queued_; }

 private:
  struct Waiter {
    std::condition_variable cv;
    bool granted = false;
  };
  // Frees a running slot and hands it to the oldest waiter, if any. mu_ held.
  void ReleaseLocked();

  const uint32_t max_running_;
  const uint32_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;  // WaitIdle
  std::deque<Waiter*> waiters_;      // Run() callers waiting for a slot, oldest first
  uint32_t running_ = 0;
  uint32_t queued_ = 0;
  uint64_t refused_ = 0;
  bool draining_ = false;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_JOB_SLOTS_H_
