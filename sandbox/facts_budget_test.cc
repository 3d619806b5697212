#include "sandbox/facts_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "base/limit_status.h"

namespace ckptscan::sandbox {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

TEST(FactsBudgetTest, EstimateIsThePayloadPlusAPricePerValueAndSaturates) {
  EXPECT_EQ(EstimateDecodeBytes(1000, 10), 1000 + 10 * kDecodedBytesPerValue);
  EXPECT_EQ(EstimateDecodeBytes(1, std::numeric_limits<uint64_t>::max() / 2),
            std::numeric_limits<uint64_t>::max());
}

TEST(FactsBudgetTest, MoreThanTheWholeBudgetFailsAtOnceNamingTheLimit) {
  FactsBudget budget(1000);
  const absl::Time start = absl::Now();
  absl::StatusOr<FactsBudget::Reservation> r = budget.Reserve(1001, Soon(), nullptr);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "facts_memory")) << r.status();
  EXPECT_EQ(base::LimitOf(r.status()).value_or(base::LimitHit{}).name, "facts_memory");
  EXPECT_EQ(base::LimitOf(r.status()).value_or(base::LimitHit{}).value, 1000u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(FactsBudgetTest, AReservationIsHeldUntilDestroyedAndMovesWithItsOwner) {
  FactsBudget budget(1000);
  {
    absl::StatusOr<FactsBudget::Reservation> a = budget.Reserve(600, Soon(), nullptr);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(budget.in_use(), 600u);
    FactsBudget::Reservation moved = *std::move(a);
    EXPECT_EQ(budget.in_use(), 600u);
    // 600 + 600 does not fit: it waits, and at its deadline it is refused.
    absl::StatusOr<FactsBudget::Reservation> b =
        budget.Reserve(600, absl::Now() + absl::Milliseconds(100), nullptr);
    EXPECT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
    EXPECT_TRUE(absl::StrContains(b.status().message(), "other jobs held 600")) << b.status();
  }
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_EQ(budget.peak(), 600u);
}

TEST(FactsBudgetTest, AWaiterGetsTheRoomWhenItIsFreed) {
  FactsBudget budget(1000);
  std::optional<FactsBudget::Reservation> first;
  first.emplace(*budget.Reserve(800, Soon(), nullptr));
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    absl::StatusOr<FactsBudget::Reservation> r = budget.Reserve(500, Soon(), nullptr);
    got = r.ok();
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(got.load());  // still waiting: 800 + 500 > 1000
  first.reset();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(budget.peak(), 800u);  // never both at once
}

TEST(FactsBudgetTest, AWaiterIsCancelledWhenItsCallerGivesUp) {
  FactsBudget budget(1000);
  absl::StatusOr<FactsBudget::Reservation> held = budget.Reserve(1000, Soon(), nullptr);
  ASSERT_TRUE(held.ok());
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cancel = true;
  });
  absl::StatusOr<FactsBudget::Reservation> r =
      budget.Reserve(1, Soon(), [&] { return cancel.load(); });
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
}

}  // namespace
}  // namespace ckptscan::sandbox
