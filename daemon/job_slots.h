// Bounded concurrency for the daemon's jobs: at most `max_running` workers at once and
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
// An upload takes no job place while its bytes stream in: it holds an upload place
// instead (BeginUpload), bounded daemon-wide (max_uploads) and per caller
// (max_uploads_per_caller), and its spooled bytes count against a daemon-wide budget
// (max_spool_bytes). Once its last byte is spooled it is admitted as a job (Upload::Admit) and
// gives its upload place back; its spooled bytes stay counted until the Upload is destroyed.
//
// One caller holds at most `max_jobs_per_caller` job places (running + queued) at once: a caller
// that never finishes its jobs (slow files, a ConvertUpload whose output it does not read) cannot
// take every place and lock the other callers out. Past it RESOURCE_EXHAUSTED names the limit.
// The caller is a bucket name (the daemon's: a uid, a client certificate, or "anonymous" for
// every caller without an identity), the same one its uploads count against.
//
// The operator's reserve: the last `reserved_job_places` job places and the last
// `reserved_uploads` upload places go to privileged callers only (the daemon's: root, its own
// uid, the admin uids and identities). Every other caller together holds at most the rest, so
// callers that each stay within their share still cannot lock the operator out.
//
// Thread-safe.
//
//   CKPT_ASSIGN_OR_RETURN(JobSlots::Ticket t, slots.Admit("uid:1000"));
//   CKPT_RETURN_IF_ERROR(t.Run([&] { return ctx->IsCancelled(); }));
//   ... run the worker ...
#ifndef CKPTSCAN_DAEMON_JOB_SLOTS_H_
#define CKPTSCAN_DAEMON_JOB_SLOTS_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ckptscan::daemon {

// What uploads in flight may hold (ckptscand's flags of the same names; main.cc derives the
// defaults from --max-running and --max-queued).
struct UploadLimits {
  uint32_t max_uploads = 16;                // streaming in at once, daemon-wide
  uint32_t max_uploads_per_caller = 8;      // of them, from one caller
  uint64_t max_spool_bytes = 256ull << 30;  // upload bytes spooled at once, daemon-wide
  uint32_t reserved_uploads = 0;            // of max_uploads, for privileged callers only
};

// Whether a caller may take the operator's reserved places.
enum class Privilege { kCaller, kOperator };

class JobSlots final {
 public:
  // `max_jobs_per_caller` 0 (or at least max_running + max_queued): no cap but the places.
  // `reserved_job_places` (below max_running + max_queued) are for Privilege::kOperator only.
  JobSlots(uint32_t max_running, uint32_t max_queued, UploadLimits uploads = {},
           uint32_t max_jobs_per_caller = 0, uint32_t reserved_job_places = 0)
      : max_running_(max_running),
        max_queued_(max_queued),
        uploads_(uploads),
        max_jobs_per_caller_(max_jobs_per_caller != 0 ? max_jobs_per_caller
                                                      : max_running + max_queued),
        reserved_job_places_(reserved_job_places) {}

  class Ticket final {
   public:
    Ticket(Ticket&& other) noexcept
        : slots_(other.slots_),
          caller_(std::move(other.caller_)),
          privilege_(other.privilege_),
          running_(other.running_),
          overflow_(other.overflow_) {
      other.slots_ = nullptr;
    }
    Ticket& operator=(Ticket&&) = delete;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

    // Waits for a running slot. Cancelled (polled every 50 ms) returns CANCELLED and leaves
    // the queue. An operator's job whose slot is not free at once runs anyway, as one of at
    // most reserved_job_places running beside the max_running (callers that hold every slot
    // with jobs that do not end must not keep the operator's job waiting behind them).
    absl::Status Run(const std::function<bool()>& cancelled);

   private:
    friend class JobSlots;
    Ticket(JobSlots* slots, std::string caller, Privilege privilege)
        : slots_(slots), caller_(std::move(caller)), privilege_(privilege) {}
    JobSlots* slots_;
    std::string caller_;
    Privilege privilege_;
    bool running_ = false;
    bool overflow_ = false;  // runs beside max_running (an operator's job)
  };

  // A job place for `caller`. RESOURCE_EXHAUSTED when max_running + max_queued jobs are
  // admitted (for a kCaller: all but the reserved ones), or when `caller` holds
  // max_jobs_per_caller of them; UNAVAILABLE after Drain.
  absl::StatusOr<Ticket> Admit(const std::string& caller,
                               Privilege privilege = Privilege::kCaller);

  // An upload in flight: an upload place and its spooled bytes, given back when destroyed.
  class Upload final {
   public:
    Upload(Upload&& other) noexcept
        : slots_(other.slots_),
          caller_(std::move(other.caller_)),
          privilege_(other.privilege_),
          bytes_(other.bytes_),
          receiving_(other.receiving_) {
      other.slots_ = nullptr;
    }
    Upload& operator=(Upload&&) = delete;
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;
    ~Upload();

    // `bytes` more to spool: RESOURCE_EXHAUSTED (nothing taken) past max_spool_bytes.
    absl::Status Spool(uint64_t bytes);
    // The upload is complete: a job place for it (RESOURCE_EXHAUSTED when all are taken or its
    // caller holds max_jobs_per_caller of them; not
    // refused for a drain that began after the upload did). The upload place is given back
    // either way; the spooled bytes stay counted while this object lives.
    absl::StatusOr<Ticket> Admit();

   private:
    friend class JobSlots;
    Upload(JobSlots* slots, std::string caller, Privilege privilege)
        : slots_(slots), caller_(std::move(caller)), privilege_(privilege) {}
    JobSlots* slots_;
    std::string caller_;
    Privilege privilege_;
    uint64_t bytes_ = 0;
    bool receiving_ = true;
  };

  // An upload from `caller` begins. UNAVAILABLE after Drain; RESOURCE_EXHAUSTED, naming the
  // limit, when every job place is taken or `caller` holds max_jobs_per_caller of them (it could
  // not run now either), when max_uploads are streaming in (for a kCaller: all but the reserved
  // ones), or when `caller` has max_uploads_per_caller of them.
  absl::StatusOr<Upload> BeginUpload(const std::string& caller,
                                     Privilege privilege = Privilege::kCaller);

  // Bytes reserved against max_spool_bytes before they are written (a conversion's output: the
  // spool budget covers uploads and outputs alike), given back when destroyed.
  class SpoolReservation final {
   public:
    SpoolReservation(SpoolReservation&& other) noexcept
        : slots_(std::exchange(other.slots_, nullptr)), bytes_(other.bytes_) {}
    SpoolReservation& operator=(SpoolReservation&&) = delete;
    SpoolReservation(const SpoolReservation&) = delete;
    SpoolReservation& operator=(const SpoolReservation&) = delete;
    ~SpoolReservation();
    uint64_t bytes() const { return bytes_; }

   private:
    friend class JobSlots;
    SpoolReservation(JobSlots* slots, uint64_t bytes) : slots_(slots), bytes_(bytes) {}
    JobSlots* slots_;
    uint64_t bytes_;
  };
  // RESOURCE_EXHAUSTED (nothing taken), naming max_spool_bytes, when `bytes` do not fit.
  absl::StatusOr<SpoolReservation> ReserveSpool(uint64_t bytes);

  // No new job from now on.
  void Drain();
  // Waits until no admitted job is left or `deadline_ms` milliseconds passed; true if none is.
  bool WaitIdle(int64_t deadline_ms);

  struct Counts {
    uint32_t running = 0;
    uint32_t queued = 0;
    uint64_t refused = 0;
    bool draining = false;
    uint32_t uploading = 0;    // uploads streaming in (no job place yet)
    uint64_t spool_bytes = 0;  // bytes the uploads in flight have spooled, and outputs reserved
  };
  Counts counts() const;
  uint32_t max_running() const { return max_running_; }
  uint32_t max_queued() const { return max_queued_; }
  uint32_t max_jobs_per_caller() const { return max_jobs_per_caller_; }
  uint32_t reserved_job_places() const { return reserved_job_places_; }
  const UploadLimits& upload_limits() const { return uploads_; }

 private:
  struct Waiter {
    absl::CondVar cv;
    bool granted = false;  // under JobSlots::mu_ (set by the releasing ticket)
  };
  // Frees a running slot and hands it to the oldest waiter, if any (an operator's extra slot
  // goes back to the reserve instead). mu_ held.
  void ReleaseLocked(bool overflow) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED (and counted as refused) when every job place `privilege` may take is
  // taken. mu_ held.
  absl::Status FullLocked(Privilege privilege) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `bytes` of max_spool_bytes, or RESOURCE_EXHAUSTED (nothing taken). mu_ held.
  absl::Status TakeSpoolLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED (and counted as refused) when `caller` holds max_jobs_per_caller job
  // places. mu_ held.
  absl::Status CallerFullLocked(const std::string& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A queue place, if one is free (UNAVAILABLE after Drain if `refuse_if_draining`). mu_ held.
  absl::StatusOr<Ticket> AdmitLocked(const std::string& caller, Privilege privilege,
                                     bool refuse_if_draining) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a job place of `caller` back (its running or queued count is the caller's). mu_ held.
  void EndJobLocked(const std::string& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives an upload place back. mu_ held.
  void EndUploadLocked(const std::string& caller) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No job running, queued or uploading (WaitIdle's condition). mu_ held.
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t max_running_;
  const uint32_t max_queued_;
  const UploadLimits uploads_;
  const uint32_t max_jobs_per_caller_;
  const uint32_t reserved_job_places_;
  mutable absl::Mutex mu_;
  // Run() callers waiting for a slot, oldest first.
  std::deque<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  uint32_t running_ ABSL_GUARDED_BY(mu_) = 0;  // overflow_ included
  // Operator jobs running beside max_running (at most reserved_job_places_).
  uint32_t overflow_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Callers with a job place (running or queued).
  std::map<std::string, uint32_t> jobs_by_caller_ ABSL_GUARDED_BY(mu_);
  uint32_t uploading_ ABSL_GUARDED_BY(mu_) = 0;
  // Callers with an upload in flight.
  std::map<std::string, uint32_t> uploading_by_caller_ ABSL_GUARDED_BY(mu_);
  uint64_t spool_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Cancels calls that stop making progress: a stream read that waits too long for the
// caller's next upload chunk, or a write the caller does not take. One thread serves every
// call: a call Starts a Watch with what to do on a stall (cancel the call), Arms it with a
// limit before each blocking read or write and Disarms it after. A Watch not re-armed or
// disarmed within its limit fires once: its action runs on the watchdog's thread, under the
// watchdog's lock (so it must be quick and must not call back into the watchdog); fired()
// then says why the read or write failed. Destroying a Watch waits out an action in progress:
// after ~Watch its action never runs.
//
// Thread-safe. Every Watch must be destroyed before the watchdog.
class StallWatchdog final {
 public:
  using Clock = std::chrono::steady_clock;

  StallWatchdog();
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  class Watch final {
   public:
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    // Fires unless Arm or Disarm is called again within `limit`.
    void Arm(Clock::duration limit);
    void Disarm();
    bool fired() const;

   private:
    friend class StallWatchdog;
    Watch(StallWatchdog* dog, std::function<void()> on_stall)
        : dog_(dog), on_stall_(std::move(on_stall)) {}
    StallWatchdog* dog_;
    std::function<void()> on_stall_;
    Clock::time_point deadline_ ABSL_GUARDED_BY(dog_->mu_) = Clock::time_point::max();
    bool fired_ ABSL_GUARDED_BY(dog_->mu_) = false;
  };

  std::unique_ptr<Watch> Start(std::function<void()> on_stall);

 private:
  void Loop();

  absl::Mutex mu_;
  absl::CondVar cv_;  // Loop's wake-up: a nearer deadline or stop_
  std::set<Watch*> watches_ ABSL_GUARDED_BY(mu_);
  // When Loop wakes up next.
  Clock::time_point next_wake_ ABSL_GUARDED_BY(mu_) = Clock::time_point::max();
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_JOB_SLOTS_H_
