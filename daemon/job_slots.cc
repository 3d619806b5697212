#include "daemon/job_slots.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace ckptscan::daemon {

absl::StatusOr<JobSlots::Ticket> JobSlots::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_) {
    return absl::UnavailableError("the daemon is shutting down and takes no new job");
  }
  if (static_cast<uint64_t>(running_) + queued_ >=
      static_cast<uint64_t>(max_running_) + max_queued_) {
    ++refused_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon is busy: ", running_, " jobs running and ", queued_,
        " queued (max_running ", max_running_, ", max_queued ", max_queued_, "); retry later"));
  }
  ++queued_;
  return Ticket(this);
}

absl::Status JobSlots::Ticket::Run(const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> lock(slots_->mu_);
  if (slots_->running_ < slots_->max_running_ && slots_->waiters_.empty()) {
    --slots_->queued_;
    ++slots_->running_;
    running_ = true;
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
    me.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
  running_ = true;
  return absl::OkStatus();
}

void JobSlots::ReleaseLocked() {
  --running_;
  if (!waiters_.empty()) {
    Waiter* next = waiters_.front();
    waiters_.pop_front();
    --queued_;
    ++running_;
    next->granted = true;
    next->cv.notify_one();
  }
}

JobSlots::Ticket::~Ticket() {
  if (slots_ == nullptr) return;
  std::lock_guard<std::mutex> lock(slots_->mu_);
  if (running_) {
    slots_->ReleaseLocked();
  } else {
    --slots_->queued_;
  }
  slots_->idle_cv_.notify_all();
}

void JobSlots::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool JobSlots::WaitIdle(int64_t deadline_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, std::chrono::milliseconds(deadline_ms),
                           [this] { return running_ == 0 && queued_ == 0; });
}

JobSlots::Counts JobSlots::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Counts{running_, queued_, refused_, draining_};
}

}  // namespace ckptscan::daemon
