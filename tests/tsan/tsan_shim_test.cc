// Checks tests/tsan/absl_mutex_tsan.cc in the ThreadSanitizer build (CKPT_TSAN,
// scripts/ci_tsan.sh): TSan orders the critical sections of Debian's absl::Mutex (plain locks,
// Await on a Condition evaluated by the unlocking thread, CondVar waits) and so reports nothing for
// correctly locked code; and it still reports a real race, also between sections under two
// different mutexes. Without the shim the first tests fail with "data race" (TSAN_OPTIONS
// halt_on_error=1, exit 66).
#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace {

struct Counter {
  absl::Mutex mu;
  absl::CondVar cv;
  int count ABSL_GUARDED_BY(mu) = 0;
  bool released ABSL_GUARDED_BY(mu) = false;
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return count >= 20000; }
};

// Two threads that each add 10,000 to c->count, one lock at a time.
void StartIncrementers(Counter* c, std::vector<std::thread>* threads) {
  for (int t = 0; t < 2; ++t) {
    threads->emplace_back([c] {
      for (int i = 0; i < 10000; ++i) {
        absl::MutexLock lock(&c->mu);
        ++c->count;
      }
    });
  }
}

TEST(TsanShimTest, LockedIncrementsAreNotRaces) {
  Counter c;
  std::vector<std::thread> threads;
  StartIncrementers(&c, &threads);
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&c.mu);
  EXPECT_EQ(c.count, 20000);
}

TEST(TsanShimTest, AwaitAndCondVarOrderTheWaiter) {
  Counter c;
  std::vector<std::thread> threads;
  // Waits on a Condition (evaluated by the incrementing threads as they unlock), then writes.
  threads.emplace_back([&c] {
    absl::MutexLock lock(&c.mu);
    c.mu.Await(absl::Condition(&c, &Counter::Reached));
    ++c.count;
    c.released = true;
    c.cv.SignalAll();
  });
  // Waits on the CondVar, with a timeout, then writes.
  threads.emplace_back([&c] {
    absl::MutexLock lock(&c.mu);
    while (!c.released) c.cv.WaitWithTimeout(&c.mu, absl::Milliseconds(5));
    ++c.count;
  });
  // Lock-when with a timeout, then writes.
  threads.emplace_back([&c] {
    const bool reached =
        c.mu.LockWhenWithTimeout(absl::Condition(&c, &Counter::Reached), absl::Seconds(60));
    ++c.count;
    c.mu.Unlock();
    EXPECT_TRUE(reached);
  });
  StartIncrementers(&c, &threads);
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&c.mu);
  EXPECT_EQ(c.count, 20003);
}

// Two sections under different mutexes are not ordered: the shim must not tie them together.
void RaceUnderTwoMutexes() {
  static absl::Mutex a;
  static absl::Mutex b;
  static int shared = 0;
  std::thread first([] {
    absl::MutexLock lock(&a);
    shared = 1;
  });
  std::thread second([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    absl::MutexLock lock(&b);
    shared += 1;
  });
  first.join();
  second.join();
  std::exit(0);
}

TEST(TsanShimDeathTest, RaceUnderTwoMutexesIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RaceUnderTwoMutexes(), testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

}  // namespace
