#include "sandbox/frame.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {
namespace {

TEST(FrameTest, HeaderIsEightBytesLittleEndian) {
  EXPECT_EQ(FrameHeader(0x0102), std::string("\x02\x01\0\0\0\0\0\0", 8));
}

TEST(FrameTest, WholeFrameFedByteByByteRoundTrips) {
  const std::string frame = FrameHeader(5) + "hello";
  FrameReader r(kMaxFrameBytes);
  for (char c : frame) ASSERT_TRUE(r.Feed(std::string(1, c)).ok());
  absl::StatusOr<std::string> payload = std::move(r).Finish();
  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(*payload, "hello");
}

TEST(FrameTest, EmptyPayloadIsAFrame) {
  FrameReader r(kMaxFrameBytes);
  ASSERT_TRUE(r.Feed(FrameHeader(0)).ok());
  absl::StatusOr<std::string> payload = std::move(r).Finish();
  ASSERT_TRUE(payload.ok());
  EXPECT_EQ(*payload, "");
}

TEST(FrameTest, NothingWrittenIsAnError) {
  FrameReader r(kMaxFrameBytes);
  EXPECT_TRUE(absl::IsInvalidArgument(std::move(r).Finish().status()));
}

TEST(FrameTest, ShortHeader) {
  FrameReader r(kMaxFrameBytes);
  ASSERT_TRUE(r.Feed("\x05\0\0").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(std::move(r).Finish().status()));
}

TEST(FrameTest, TruncatedPayload) {
  FrameReader r(kMaxFrameBytes);
  ASSERT_TRUE(r.Feed(FrameHeader(10) + "abc").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(std::move(r).Finish().status()));
}

TEST(FrameTest, BytesAfterThePayloadAreRejectedAsTheyArrive) {
  FrameReader r(kMaxFrameBytes);
  ASSERT_TRUE(r.Feed(FrameHeader(2) + "ab").ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.Feed("c")));
}

TEST(FrameTest, DeclaredLengthOverTheCapIsRefusedBeforeAnyPayload) {
  FrameReader r(16);
  EXPECT_TRUE(absl::IsResourceExhausted(r.Feed(FrameHeader(17))));
  FrameReader huge(kMaxFrameBytes);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.Feed(FrameHeader(uint64_t{1} << 63))));
}

TEST(FrameTest, WriteFrameWritesHeaderThenPayload) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_TRUE(WriteFrame(fds[1], "xyz").ok());
  ::close(fds[1]);
  char buf[64];
  const ssize_t n = ::read(fds[0], buf, sizeof(buf));
  ::close(fds[0]);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), FrameHeader(3) + "xyz");
}

}  // namespace
}  // namespace ckptscan::sandbox
