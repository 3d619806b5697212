#include "daemon/upload.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ckptscan::daemon {
namespace {

using Limit = UploadDue::Limit;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

SpoolOptions Liveness() {
  SpoolOptions o;
  o.idle_timeout = absl::Seconds(30);
  o.min_bytes_per_second = 1024;
  o.deadline = absl::Hours(6);
  return o;
}

TEST(NextUploadDueTest, ANewUploadHasTheIdleTimeoutAsItsGrace) {
  const UploadDue due = NextUploadDue(Liveness(), kStart, 0, kStart);
  EXPECT_EQ(due.at, kStart + absl::Seconds(30));
  EXPECT_EQ(due.limit, Limit::kIdle);
}

TEST(NextUploadDueTest, ATrickleIsDueByTheRateItOwesNotByItsLastByte) {
  // One byte every 20 s: each resets the idle timeout, but after the grace the rate is owed.
  const UploadDue due = NextUploadDue(Liveness(), kStart, 2, kStart + absl::Seconds(40));
  EXPECT_EQ(due.limit, Limit::kMinRate);
  EXPECT_LT(due.at, kStart + absl::Seconds(40)) << "already too slow: due at once";
}

TEST(NextUploadDueTest, AnUploadThatStopsAtOnceIsNamedByItsIdleTimeout) {
  // 100 bytes in its first 0.1 s, then nothing: both limits fall due near start + 30 s.
  const UploadDue due = NextUploadDue(Liveness(), kStart, 100, kStart + absl::Milliseconds(100));
  EXPECT_EQ(due.at, kStart + absl::Seconds(30) + absl::Milliseconds(100));
  EXPECT_EQ(due.limit, Limit::kIdle);
}

TEST(NextUploadDueTest, AFastUploadIsDueOnlyByItsIdleTimeout) {
  const UploadDue due = NextUploadDue(Liveness(), kStart, 1ull << 30, kStart + absl::Seconds(40));
  EXPECT_EQ(due.at, kStart + absl::Seconds(70));
  EXPECT_EQ(due.limit, Limit::kIdle);
}

TEST(NextUploadDueTest, TheDeadlineHoldsHoweverFastTheUpload) {
  const absl::Time now = kStart + absl::Hours(6) - absl::Seconds(5);
  const UploadDue due = NextUploadDue(Liveness(), kStart, 1ull << 40, now);
  EXPECT_EQ(due.at, kStart + absl::Hours(6));
  EXPECT_EQ(due.limit, Limit::kDeadline);
}

TEST(NextUploadDueTest, NoRateMeansTheIdleTimeoutAlone) {
  SpoolOptions o = Liveness();
  o.min_bytes_per_second = 0;
  EXPECT_EQ(NextUploadDue(o, kStart, 0, kStart + absl::Hours(1)).limit, Limit::kIdle);
}

TEST(UploadStallMessageTest, EachMessageNamesItsLimit) {
  EXPECT_NE(UploadStallMessage(Liveness(), Limit::kIdle).find("upload_idle_timeout"),
            std::string::npos);
  EXPECT_NE(UploadStallMessage(Liveness(), Limit::kMinRate).find("upload_min_rate"),
            std::string::npos);
  EXPECT_NE(UploadStallMessage(Liveness(), Limit::kDeadline).find("upload_deadline"),
            std::string::npos);
}

}  // namespace
}  // namespace ckptscan::daemon
