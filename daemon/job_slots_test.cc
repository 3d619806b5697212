#include "daemon/job_slots.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace ckptscan::daemon {
namespace {

TEST(JobSlotsTest, AdmitsRunningPlusQueuedThenRefusesAtOnce) {
  JobSlots slots(2, 1);
  std::vector<JobSlots::Ticket> tickets;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<JobSlots::Ticket> t = slots.Admit("uid:1");
    ASSERT_TRUE(t.ok()) << i;
    tickets.push_back(*std::move(t));
  }
  absl::StatusOr<JobSlots::Ticket> over = slots.Admit("uid:1");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(slots.counts().refused, 1u);
  EXPECT_EQ(slots.counts().queued, 3u);
  tickets.pop_back();  // a place comes back
  EXPECT_TRUE(slots.Admit("uid:1").ok());
}

TEST(JobSlotsTest, RunWaitsForASlotAndCountsMove) {
  JobSlots slots(1, 4);
  absl::StatusOr<JobSlots::Ticket> first = slots.Admit("uid:1");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->Run(nullptr).ok());
  EXPECT_EQ(slots.counts().running, 1u);
  std::atomic<bool> second_running{false};
  std::thread t([&] {
    absl::StatusOr<JobSlots::Ticket> second = slots.Admit("uid:1");
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE(second->Run(nullptr).ok());
    second_running = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(second_running.load()) << "ran while the only slot was taken";
  EXPECT_EQ(slots.counts().queued, 1u);
  { JobSlots::Ticket done = *std::move(first); }  // frees the slot
  t.join();
  EXPECT_TRUE(second_running.load());
  EXPECT_EQ(slots.counts().running, 0u);
  EXPECT_EQ(slots.counts().queued, 0u);
}

TEST(JobSlotsTest, SlotsGoToWaitersInArrivalOrder) {
  JobSlots slots(1, 8);
  absl::StatusOr<JobSlots::Ticket> busy = slots.Admit("uid:1");
  ASSERT_TRUE(busy.ok() && busy->Run(nullptr).ok());
  absl::Mutex mu;
  std::vector<int> order;  // under mu while the threads run
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<JobSlots::Ticket> t = slots.Admit("uid:1");
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(t->Run(nullptr).ok());
      absl::MutexLock lock(&mu);
      order.push_back(i);
    });
    // Each waiter is queued before the next arrives.
    while (slots.counts().queued != static_cast<uint32_t>(i + 1)) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  { JobSlots::Ticket done = *std::move(busy); }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(slots.counts().running, 0u);
  EXPECT_EQ(slots.counts().queued, 0u);
}

TEST(JobSlotsTest, CancelledWhileQueuedLeavesTheQueue) {
  JobSlots slots(1, 4);
  absl::StatusOr<JobSlots::Ticket> busy = slots.Admit("uid:1");
  ASSERT_TRUE(busy.ok() && busy->Run(nullptr).ok());
  absl::StatusOr<JobSlots::Ticket> waiting = slots.Admit("uid:1");
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->Run([] { return true; }).code(), absl::StatusCode::kCancelled);
  { JobSlots::Ticket gone = *std::move(waiting); }
  EXPECT_EQ(slots.counts().queued, 0u);
  EXPECT_EQ(slots.counts().running, 1u);
}

TEST(JobSlotsTest, DrainRefusesNewJobsAndWaitIdleSeesTheLastOneEnd) {
  JobSlots slots(2, 2);
  absl::StatusOr<JobSlots::Ticket> running = slots.Admit("uid:1");
  ASSERT_TRUE(running.ok() && running->Run(nullptr).ok());
  slots.Drain();
  EXPECT_EQ(slots.Admit("uid:1").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(slots.WaitIdle(50));
  std::thread t([&] { JobSlots::Ticket done = *std::move(running); });
  EXPECT_TRUE(slots.WaitIdle(5000));
  t.join();
}

// Issue 18: uploads hold upload places, not job places, while they stream in.
TEST(JobSlotsUploadTest, UploadsInFlightTakeNoJobPlace) {
  JobSlots slots(1, 0, UploadLimits{.max_uploads = 4, .max_uploads_per_caller = 4});
  std::vector<JobSlots::Upload> uploads;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<JobSlots::Upload> u = slots.BeginUpload("uid:1");
    ASSERT_TRUE(u.ok()) << i << " " << u.status();
    uploads.push_back(*std::move(u));
  }
  EXPECT_EQ(slots.counts().uploading, 3u);
  EXPECT_EQ(slots.counts().queued + slots.counts().running, 0u);
  // The one job place is still there for another job.
  absl::StatusOr<JobSlots::Ticket> job = slots.Admit("uid:1");
  ASSERT_TRUE(job.ok());
  // While it is taken a new upload is refused at once (it could not run either) ...
  absl::StatusOr<JobSlots::Upload> refused = slots.BeginUpload("uid:2");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "max_running 1")) << refused.status();
  // ... and a complete upload finds no place: refused, its upload place given back.
  EXPECT_EQ(uploads[0].Admit().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(slots.counts().uploading, 2u);
  { JobSlots::Ticket done = *std::move(job); }
  absl::StatusOr<JobSlots::Ticket> from_upload = uploads[1].Admit();
  ASSERT_TRUE(from_upload.ok());
  EXPECT_EQ(slots.counts().uploading, 1u);
  EXPECT_EQ(slots.counts().queued, 1u);
}

TEST(JobSlotsUploadTest, PerCallerAndDaemonWideCapsNameTheirLimit) {
  JobSlots slots(4, 4, UploadLimits{.max_uploads = 3, .max_uploads_per_caller = 2});
  absl::StatusOr<JobSlots::Upload> a1 = slots.BeginUpload("uid:1");
  absl::StatusOr<JobSlots::Upload> a2 = slots.BeginUpload("uid:1");
  ASSERT_TRUE(a1.ok() && a2.ok());
  absl::StatusOr<JobSlots::Upload> a3 = slots.BeginUpload("uid:1");
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "max_uploads_per_caller 2")) << a3.status();
  EXPECT_TRUE(absl::StrContains(a3.status().message(), "uid:1")) << a3.status();
  absl::StatusOr<JobSlots::Upload> b1 = slots.BeginUpload("uid:2");
  ASSERT_TRUE(b1.ok()) << "another caller has places of its own";
  absl::StatusOr<JobSlots::Upload> c1 = slots.BeginUpload("uid:3");
  EXPECT_EQ(c1.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(c1.status().message(), "max_uploads 3")) << c1.status();
  EXPECT_EQ(slots.counts().refused, 2u);
  { JobSlots::Upload done = *std::move(a1); }  // the caller's place comes back
  EXPECT_TRUE(slots.BeginUpload("uid:1").ok());
}

// One caller holds at most max_jobs_per_caller job places, running and queued together: it
// cannot take every place and lock the other callers out.
TEST(JobSlotsTest, OneCallerHoldsAtMostItsCapOfJobPlaces) {
  JobSlots slots(1, 2, UploadLimits{}, 2);
  EXPECT_EQ(slots.max_jobs_per_caller(), 2u);
  std::vector<JobSlots::Ticket> mine;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<JobSlots::Ticket> t = slots.Admit("uid:1");
    ASSERT_TRUE(t.ok()) << i << " " << t.status();
    mine.push_back(*std::move(t));  // a moved ticket still counts for its caller
  }
  ASSERT_TRUE(mine[1].Run(nullptr).ok());
  absl::StatusOr<JobSlots::Ticket> third = slots.Admit("uid:1");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(third.status().message(), "max_jobs_per_caller 2"))
      << third.status();
  EXPECT_TRUE(absl::StrContains(third.status().message(), "uid:1")) << third.status();
  EXPECT_EQ(slots.counts().running, 1u);
  EXPECT_EQ(slots.counts().queued, 1u);
  // The place it could not take is another caller's.
  absl::StatusOr<JobSlots::Ticket> other = slots.Admit("uid:2");
  ASSERT_TRUE(other.ok()) << other.status();
  // Every place taken: the daemon-wide refusal, whoever asks.
  absl::StatusOr<JobSlots::Ticket> full = slots.Admit("uid:3");
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(full.status().message(), "max_running 1")) << full.status();
  EXPECT_EQ(slots.counts().refused, 2u);
  mine.pop_back();  // the running one ends: the caller's place comes back
  EXPECT_TRUE(slots.Admit("uid:1").ok());
}

TEST(JobSlotsTest, CapDefaultsToEveryPlace) {
  JobSlots slots(1, 2);
  EXPECT_EQ(slots.max_jobs_per_caller(), 3u);
  std::vector<JobSlots::Ticket> mine;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<JobSlots::Ticket> t = slots.Admit("anonymous");
    ASSERT_TRUE(t.ok()) << i << " " << t.status();
    mine.push_back(*std::move(t));
  }
}

// An upload's job place counts against its caller's cap too: refused at once when the caller
// already holds its cap, and again when the upload completes if it has reached it meanwhile.
TEST(JobSlotsUploadTest, UploadsCountAgainstTheCallersJobCap) {
  JobSlots slots(1, 3, UploadLimits{.max_uploads = 4, .max_uploads_per_caller = 4}, 2);
  absl::StatusOr<JobSlots::Upload> u1 = slots.BeginUpload("uid:1");
  absl::StatusOr<JobSlots::Upload> u2 = slots.BeginUpload("uid:1");
  ASSERT_TRUE(u1.ok() && u2.ok()) << "streaming uploads hold no job place";
  absl::StatusOr<JobSlots::Ticket> j1 = slots.Admit("uid:1");
  ASSERT_TRUE(j1.ok()) << j1.status();
  absl::StatusOr<JobSlots::Ticket> j2 = u1->Admit();
  ASSERT_TRUE(j2.ok()) << j2.status();
  absl::StatusOr<JobSlots::Ticket> j3 = u2->Admit();
  EXPECT_EQ(j3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(j3.status().message(), "max_jobs_per_caller 2")) << j3.status();
  EXPECT_EQ(slots.counts().uploading, 0u) << "the refused upload gave its upload place back";
  absl::StatusOr<JobSlots::Upload> u3 = slots.BeginUpload("uid:1");
  EXPECT_EQ(u3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(u3.status().message(), "max_jobs_per_caller 2")) << u3.status();
  absl::StatusOr<JobSlots::Upload> b = slots.BeginUpload("uid:2");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->Admit().ok());
  { JobSlots::Ticket done = *std::move(j1); }
  EXPECT_TRUE(slots.BeginUpload("uid:1").ok());
}

TEST(JobSlotsUploadTest, SpoolBudgetIsSharedAndHeldUntilTheUploadEnds) {
  JobSlots slots(2, 2, UploadLimits{.max_spool_bytes = 100});
  absl::StatusOr<JobSlots::Upload> a = slots.BeginUpload("uid:1");
  absl::StatusOr<JobSlots::Upload> b = slots.BeginUpload("uid:2");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->Spool(60).ok());
  absl::Status over = b->Spool(41);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), "max_spool_bytes 100")) << over;
  EXPECT_TRUE(b->Spool(40).ok());
  EXPECT_EQ(slots.counts().spool_bytes, 100u);
  EXPECT_EQ(b->Spool(~0ull).code(), absl::StatusCode::kResourceExhausted);  // no overflow
  absl::StatusOr<JobSlots::Ticket> job = a->Admit();  // complete: its bytes stay counted
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(slots.counts().spool_bytes, 100u);
  { JobSlots::Upload done = *std::move(a); }
  EXPECT_EQ(slots.counts().spool_bytes, 40u);
}

TEST(JobSlotsUploadTest, OutputsAreReservedAgainstTheSpoolBudgetBesideUploads) {
  JobSlots slots(2, 2, UploadLimits{.max_spool_bytes = 1000});
  absl::StatusOr<JobSlots::Upload> upload = slots.BeginUpload("uid:1");
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(upload->Spool(600).ok());
  absl::StatusOr<JobSlots::SpoolReservation> too_much = slots.ReserveSpool(500);
  EXPECT_TRUE(absl::IsResourceExhausted(too_much.status()));
  EXPECT_TRUE(absl::StrContains(too_much.status().message(), "max_spool_bytes"));
  {
    absl::StatusOr<JobSlots::SpoolReservation> fits = slots.ReserveSpool(400);
    ASSERT_TRUE(fits.ok());
    EXPECT_EQ(slots.counts().spool_bytes, 1000u);
    EXPECT_FALSE(upload->Spool(1).ok());
  }
  EXPECT_EQ(slots.counts().spool_bytes, 600u);
}

TEST(JobSlotsUploadTest, DrainRefusesNewUploadsAdmitsThoseInFlightAndWaitsForThem) {
  JobSlots slots(2, 2);
  absl::StatusOr<JobSlots::Upload> u = slots.BeginUpload("uid:1");
  ASSERT_TRUE(u.ok());
  slots.Drain();
  EXPECT_EQ(slots.BeginUpload("uid:2").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(slots.WaitIdle(50)) << "an upload in flight is work the drain waits for";
  absl::StatusOr<JobSlots::Ticket> job = u->Admit();
  ASSERT_TRUE(job.ok()) << "an upload begun before the drain still runs";
  std::thread t([&] {
    JobSlots::Ticket done = *std::move(job);
    JobSlots::Upload gone = *std::move(u);
  });
  EXPECT_TRUE(slots.WaitIdle(5000));
  t.join();
}

TEST(StallWatchdogTest, FiresOnceAfterTheLimitUnlessReArmed) {
  StallWatchdog dog;
  std::atomic<int> stalls{0};
  std::unique_ptr<StallWatchdog::Watch> busy = dog.Start([&] { ++stalls; });
  std::unique_ptr<StallWatchdog::Watch> idle = dog.Start([&] { stalls += 100; });
  idle->Arm(std::chrono::milliseconds(100));
  // Re-armed every 20 ms for 300 ms: never a second without progress.
  for (int i = 0; i < 15; ++i) {
    busy->Arm(std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  busy->Disarm();
  EXPECT_EQ(stalls.load(), 100);
  EXPECT_FALSE(busy->fired());
  EXPECT_TRUE(idle->fired());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(stalls.load(), 100) << "fires once, and not when disarmed";
}

TEST(StallWatchdogTest, AnEarlierDeadlineWakesTheWatchdog) {
  StallWatchdog dog;
  std::atomic<bool> fired{false};
  std::unique_ptr<StallWatchdog::Watch> late = dog.Start([] {});
  late->Arm(std::chrono::hours(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the watchdog sleeps for an hour
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<StallWatchdog::Watch> soon = dog.Start([&] { fired = true; });
  soon->Arm(std::chrono::milliseconds(50));
  while (!fired && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(fired.load());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(StallWatchdogTest, ADestroyedWatchNeverFires) {
  StallWatchdog dog;
  std::atomic<int> stalls{0};
  for (int i = 0; i < 100; ++i) {
    std::unique_ptr<StallWatchdog::Watch> w = dog.Start([&] { ++stalls; });
    w->Arm(std::chrono::milliseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(stalls.load(), 0) << "destroyed long before its deadline";
}

TEST(JobSlotsReserveTest, CallersWithinTheirSharesLeaveTheOperatorsPlaces) {
  // 4 places, 2 per caller, 1 reserved: two callers together get 3, the operator the last.
  JobSlots slots(2, 2, {}, 2, 1);
  std::vector<JobSlots::Ticket> held;
  for (const char* caller : {"uid:65523", "uid:65523", "uid:65524"}) {
    absl::StatusOr<JobSlots::Ticket> t = slots.Admit(caller);
    ASSERT_TRUE(t.ok()) << caller << t.status();
    held.push_back(*std::move(t));
  }
  absl::StatusOr<JobSlots::Ticket> third = slots.Admit("uid:65524");
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_TRUE(absl::StrContains(third.status().message(), "reserved_job_places 1"))
      << third.status();
  EXPECT_TRUE(slots.Admit("uid:0", Privilege::kOperator).ok());
}

TEST(JobSlotsReserveTest, TheOperatorMayTakeEveryPlaceButItsOwnCap) {
  JobSlots slots(1, 1, {}, 2, 1);
  absl::StatusOr<JobSlots::Ticket> a = slots.Admit("uid:0", Privilege::kOperator);
  absl::StatusOr<JobSlots::Ticket> b = slots.Admit("uid:0", Privilege::kOperator);
  EXPECT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(slots.Admit("uid:0", Privilege::kOperator).status()));
}

TEST(JobSlotsReserveTest, AnOperatorsJobRunsBesideCallersWhoHoldEverySlot) {
  JobSlots slots(1, 2, {}, 2, 1);
  absl::StatusOr<JobSlots::Ticket> held = slots.Admit("uid:65523");
  ASSERT_TRUE(held.ok() && held->Run(nullptr).ok());
  absl::StatusOr<JobSlots::Ticket> root = slots.Admit("uid:0", Privilege::kOperator);
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->Run(nullptr).ok()) << "waited behind a caller's job";
  EXPECT_EQ(slots.counts().running, 2u);
  // Only `reserved_job_places` at once: another operator job waits for a slot like any.
  JobSlots::Ticket done = *std::move(root);
  {
    JobSlots::Ticket gone = std::move(done);
  }
  EXPECT_EQ(slots.counts().running, 1u);
}

TEST(JobSlotsReserveTest, UploadPlacesHaveTheirOwnReserve) {
  JobSlots slots(4, 4, UploadLimits{.max_uploads = 2, .max_uploads_per_caller = 1,
                                    .reserved_uploads = 1});
  absl::StatusOr<JobSlots::Upload> a = slots.BeginUpload("uid:65521");
  ASSERT_TRUE(a.ok());
  absl::StatusOr<JobSlots::Upload> b = slots.BeginUpload("uid:65522");
  EXPECT_TRUE(absl::IsResourceExhausted(b.status()));
  EXPECT_TRUE(absl::StrContains(b.status().message(), "reserved_uploads 1")) << b.status();
  absl::StatusOr<JobSlots::Upload> root = slots.BeginUpload("uid:0", Privilege::kOperator);
  ASSERT_TRUE(root.ok());
  // Once spooled, an operator's upload takes a job place with the operator's privilege.
  EXPECT_TRUE(root->Admit().ok());
}

}  // namespace
}  // namespace ckptscan::daemon
