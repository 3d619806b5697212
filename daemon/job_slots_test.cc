#include "daemon/job_slots.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ckptscan::daemon {
namespace {

TEST(JobSlotsTest, AdmitsRunningPlusQueuedThenRefusesAtOnce) {
  JobSlots slots(2, 1);
  std::vector<JobSlots::Ticket> tickets;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<JobSlots::Ticket> t = slots.Admit();
    ASSERT_TRUE(t.ok()) << i;
    tickets.push_back(*std::move(t));
  }
  absl::StatusOr<JobSlots::Ticket> over = slots.Admit();
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(slots.counts().refused, 1u);
  EXPECT_EQ(slots.counts().queued, 3u);
  tickets.pop_back();  // a place comes back
  EXPECT_TRUE(slots.Admit().ok());
}

TEST(JobSlotsTest, RunWaitsForASlotAndCountsMove) {
  JobSlots slots(1, 4);
  absl::StatusOr<JobSlots::Ticket> first = slots.Admit();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->Run(nullptr).ok());
  EXPECT_EQ(slots.counts().running, 1u);
  std::atomic<bool> second_running{false};
  std::thread t([&] {
    absl::StatusOr<JobSlots::Ticket> second = slots.Admit();
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
  absl::StatusOr<JobSlots::Ticket> busy = slots.Admit();
  ASSERT_TRUE(busy.ok() && busy->Run(nullptr).ok());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<JobSlots::Ticket> t = slots.Admit();
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE(t->Run(nullptr).ok());
      std::lock_guard<std::mutex> lock(mu);
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
  absl::StatusOr<JobSlots::Ticket> busy = slots.Admit();
  ASSERT_TRUE(busy.ok() && busy->Run(nullptr).ok());
  absl::StatusOr<JobSlots::Ticket> waiting = slots.Admit();
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->Run([] { return true; }).code(), absl::StatusCode::kCancelled);
  { JobSlots::Ticket gone = *std::move(waiting); }
  EXPECT_EQ(slots.counts().queued, 0u);
  EXPECT_EQ(slots.counts().running, 1u);
}

TEST(JobSlotsTest, DrainRefusesNewJobsAndWaitIdleSeesTheLastOneEnd) {
  JobSlots slots(2, 2);
  absl::StatusOr<JobSlots::Ticket> running = slots.Admit();
  ASSERT_TRUE(running.ok() && running->Run(nullptr).ok());
  slots.Drain();
  EXPECT_EQ(slots.Admit().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(slots.WaitIdle(50));
  std::thread t([&] { JobSlots::Ticket done = *std::move(running); });
  EXPECT_TRUE(slots.WaitIdle(5000));
  t.join();
}

}  // namespace
}  // namespace ckptscan::daemon
