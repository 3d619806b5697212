#include "daemon/job_slots.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ckptscan::daemon {

absl::StatusOr<JobSlots::Ticket> JobSlots::Admit(const std::string& caller, Privilege privilege) {
  absl::MutexLock lock(&mu_);
  return AdmitLocked(caller, privilege, /*refuse_if_draining=*/true);
}

absl::Status JobSlots::FullLocked(Privilege privilege) {
  const uint64_t places = static_cast<uint64_t>(max_running_) + max_queued_;
  const uint64_t open = privilege == Privilege::kOperator
                            ? places
                            : places - std::min<uint64_t>(reserved_job_places_, places);
  if (static_cast<uint64_t>(running_) + queued_ < open) return absl::OkStatus();
  ++refused_;
  return absl::ResourceExhaustedError(absl::StrCat(
      "the daemon is busy: ", running_, " jobs running and ", queued_, " queued (max_running ",
      max_running_, ", max_queued ", max_queued_,
      reserved_job_places_ == 0 || privilege == Privilege::kOperator
          ? ""
          : absl::StrCat(", of which reserved_job_places ", reserved_job_places_,
                         " for the operator"),
      "); retry later"));
}

absl::Status JobSlots::CallerFullLocked(const std::string& caller) {
  const auto it = jobs_by_caller_.find(caller);
  const uint32_t mine = it == jobs_by_caller_.end() ? 0 : it->second;
  if (mine < max_jobs_per_caller_) return absl::OkStatus();
  ++refused_;
  return absl::ResourceExhaustedError(absl::StrCat(
      caller, " holds ", mine, " job places (running or queued), its limit (max_jobs_per_caller ",
      max_jobs_per_caller_, "); wait for one to finish"));
}

absl::StatusOr<JobSlots::Ticket> JobSlots::AdmitLocked(const std::string& caller,
                                                       Privilege privilege,
                                                       bool refuse_if_draining) {
  if (refuse_if_draining && draining_) {
    return absl::UnavailableError("the daemon is shutting down and takes no new job");
  }
  if (absl::Status s = FullLocked(privilege); !s.ok()) return s;
  if (absl::Status s = CallerFullLocked(caller); !s.ok()) return s;
  ++queued_;
  ++jobs_by_caller_[caller];
  return Ticket(this, caller, privilege);
}

void JobSlots::EndJobLocked(const std::string& caller) {
  const auto it = jobs_by_caller_.find(caller);
  if (it != jobs_by_caller_.end() && --it->second == 0) jobs_by_caller_.erase(it);
}

absl::StatusOr<JobSlots::Upload> JobSlots::BeginUpload(const std::string& caller,
                                                       Privilege privilege) {
  absl::MutexLock lock(&mu_);
  if (draining_) {
    return absl::UnavailableError("the daemon is shutting down and takes no new job");
  }
  if (absl::Status s = FullLocked(privilege); !s.ok()) return s;
  if (absl::Status s = CallerFullLocked(caller); !s.ok()) return s;
  const uint32_t open = privilege == Privilege::kOperator
                            ? uploads_.max_uploads
                            : uploads_.max_uploads -
                                  std::min(uploads_.reserved_uploads, uploads_.max_uploads);
  if (uploading_ >= open) {
    ++refused_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon is receiving ", uploading_, " uploads, its limit (max_uploads ",
        uploads_.max_uploads,
        open == uploads_.max_uploads
            ? ""
            : absl::StrCat(", of which reserved_uploads ", uploads_.reserved_uploads,
                           " for the operator"),
        "); retry later"));
  }
  const auto it = uploading_by_caller_.find(caller);
  const uint32_t mine = it == uploading_by_caller_.end() ? 0 : it->second;
  if (mine >= uploads_.max_uploads_per_caller) {
    ++refused_;
    return absl::ResourceExhaustedError(absl::StrCat(
        caller, " has ", mine, " uploads in flight, its limit (max_uploads_per_caller ",
        uploads_.max_uploads_per_caller, "); finish one first"));
  }
  ++uploading_by_caller_[caller];
  ++uploading_;
  return Upload(this, caller, privilege);
}

void JobSlots::EndUploadLocked(const std::string& caller) {
  --uploading_;
  const auto it = uploading_by_caller_.find(caller);
  if (it != uploading_by_caller_.end() && --it->second == 0) uploading_by_caller_.erase(it);
}

absl::Status JobSlots::TakeSpoolLocked(uint64_t bytes) {
  const uint64_t budget = uploads_.max_spool_bytes;
  if (bytes > budget || spool_bytes_ > budget - bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon's spool is full: uploads and outputs in flight hold ", spool_bytes_,
        " bytes, ", bytes, " more do not fit (max_spool_bytes ", budget, "); retry later"));
  }
  spool_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status JobSlots::Upload::Spool(uint64_t bytes) {
  absl::MutexLock lock(&slots_->mu_);
  if (absl::Status s = slots_->TakeSpoolLocked(bytes); !s.ok()) return s;
  bytes_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<JobSlots::SpoolReservation> JobSlots::ReserveSpool(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = TakeSpoolLocked(bytes); !s.ok()) return s;
  return SpoolReservation(this, bytes);
}

JobSlots::SpoolReservation::~SpoolReservation() {
  if (slots_ == nullptr) return;
  absl::MutexLock lock(&slots_->mu_);
  slots_->spool_bytes_ -= bytes_;
}

absl::StatusOr<JobSlots::Ticket> JobSlots::Upload::Admit() {
  absl::MutexLock lock(&slots_->mu_);
  if (receiving_) {
    receiving_ = false;
    slots_->EndUploadLocked(caller_);
  }
  return slots_->AdmitLocked(caller_, privilege_, /*refuse_if_draining=*/false);
}

JobSlots::Upload::~Upload() {
  if (slots_ == nullptr) return;
  absl::MutexLock lock(&slots_->mu_);
  if (receiving_) slots_->EndUploadLocked(caller_);
  slots_->spool_bytes_ -= bytes_;
}

absl::Status JobSlots::Ticket::Run(const std::function<bool()>& cancelled) {
  absl::MutexLock lock(&slots_->mu_);
  if (slots_->running_ - slots_->overflow_ < slots_->max_running_ && slots_->waiters_.empty()) {
    --slots_->queued_;
    ++slots_->running_;
    running_ = true;
    return absl::OkStatus();
  }
  if (privilege_ == Privilege::kOperator && slots_->overflow_ < slots_->reserved_job_places_) {
    --slots_->queued_;
    ++slots_->running_;
    ++slots_->overflow_;
    running_ = true;
    overflow_ = true;
    return absl::OkStatus();
  }
  Waiter me;
  slots_->waiters_.push_back(&me);
  // A releasing ticket moves the slot to us (counts included) before it wakes us.
  while (!me.granted) {
    if (cancelled && cancelled()) {
      std::erase(slots_->waiters_, &me);
      return absl::CancelledError("the caller cancelled while the job was queued");
    }
    me.cv.WaitWithTimeout(&slots_->mu_, absl::Milliseconds(50));
  }
  running_ = true;
  return absl::OkStatus();
}

void JobSlots::ReleaseLocked(bool overflow) {
  --running_;
  if (overflow) {
    --overflow_;
    return;
  }
  if (!waiters_.empty()) {
    Waiter* next = waiters_.front();
    waiters_.pop_front();
    --queued_;
    ++running_;
    next->granted = true;
    next->cv.Signal();
  }
}

JobSlots::Ticket::~Ticket() {
  if (slots_ == nullptr) return;
  absl::MutexLock lock(&slots_->mu_);
  if (running_) {
    slots_->ReleaseLocked(overflow_);
  } else {
    --slots_->queued_;
  }
  slots_->EndJobLocked(caller_);
}

void JobSlots::Drain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool JobSlots::IdleLocked() const { return running_ == 0 && queued_ == 0 && uploading_ == 0; }

bool JobSlots::WaitIdle(int64_t deadline_ms) {
  // The condition is re-evaluated whenever mu_ is released: no notification to forget.
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &JobSlots::IdleLocked),
                              absl::Milliseconds(deadline_ms));
}

JobSlots::Counts JobSlots::counts() const {
  absl::MutexLock lock(&mu_);
  return Counts{running_, queued_, refused_, draining_, uploading_, spool_bytes_};
}

// --- StallWatchdog ------------------------------------------------------------------------

StallWatchdog::StallWatchdog() : thread_([this] { Loop(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.Signal();
  thread_.join();
}

std::unique_ptr<StallWatchdog::Watch> StallWatchdog::Start(std::function<void()> on_stall) {
  std::unique_ptr<Watch> watch(new Watch(this, std::move(on_stall)));
  absl::MutexLock lock(&mu_);
  watches_.insert(watch.get());
  return watch;
}

StallWatchdog::Watch::~Watch() {
  absl::MutexLock lock(&dog_->mu_);
  dog_->watches_.erase(this);
}

void StallWatchdog::Watch::Arm(Clock::duration limit) {
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline =
      limit >= Clock::time_point::max() - now ? Clock::time_point::max() : now + limit;
  absl::MutexLock lock(&dog_->mu_);
  deadline_ = deadline;
  // The watchdog sleeps until its earliest deadline; wake it when this one comes first.
  if (deadline < dog_->next_wake_) dog_->cv_.Signal();
}

void StallWatchdog::Watch::Disarm() {
  absl::MutexLock lock(&dog_->mu_);
  deadline_ = Clock::time_point::max();
}

bool StallWatchdog::Watch::fired() const {
  absl::MutexLock lock(&dog_->mu_);
  return fired_;
}

void StallWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    for (Watch* w : watches_) {
      w->dog_->mu_.AssertHeld();  // w->dog_ is this: tells the analysis its fields are ours
      if (w->deadline_ <= now) {
        w->deadline_ = Clock::time_point::max();
        w->fired_ = true;
        if (w->on_stall_) w->on_stall_();
      } else {
        next = std::min(next, w->deadline_);
      }
    }
    next_wake_ = next;
    if (next == Clock::time_point::max()) {
      cv_.Wait(&mu_);
    } else {
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(next - Clock::now()));
    }
  }
}

}  // namespace ckptscan::daemon
