#include "base/unique_fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ckptscan::base {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFdTest, ClosesOnDestruction) {
  int raw = -1;
  {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveTransfersOwnershipAndLeavesTheSourceEmpty) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(b.get(), raw);
  UniqueFd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveAssignClosesTheDescriptorItReplaces) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  UniqueFd b(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int old = a.get();
  a = std::move(b);
  EXPECT_FALSE(IsOpen(old));
  EXPECT_TRUE(IsOpen(a.get()));
}

TEST(UniqueFdTest, ReleaseGivesUpWithoutClosing) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.release();
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(IsOpen(raw));
  ::close(raw);
}

// Sends `fds` over `sock` with one byte of data.
void SendFds(int sock, const std::vector<int>& fds) { ASSERT_EQ(SendWithFds(sock, "x", fds), 1); }

// Receives one message into a control buffer with room for `room` descriptors.
std::vector<UniqueFd> Receive(int sock, size_t room, int* flags) {
  char byte;
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * room));
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  EXPECT_EQ(::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC), 1);
  *flags = msg.msg_flags;
  return TakeReceivedFds(msg);
}

TEST(TakeReceivedFdsTest, OwnsEveryDescriptorOfTheMessage) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]);
  UniqueFd b(sv[1]);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SendFds(a.get(), {null.get(), null.get(), null.get()});
  int flags = 0;
  std::vector<UniqueFd> got = Receive(b.get(), 3, &flags);
  ASSERT_EQ(got.size(), 3u);
  std::vector<int> raw;
  for (const UniqueFd& fd : got) {
    EXPECT_TRUE(IsOpen(fd.get()));
    EXPECT_NE(fd.get(), null.get());
    raw.push_back(fd.get());
  }
  got.clear();
  for (int fd : raw) EXPECT_FALSE(IsOpen(fd)) << "a received descriptor outlived its owner";
}

TEST(TakeReceivedFdsTest, NoControlMessageIsNoDescriptor) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]);
  UniqueFd b(sv[1]);
  SendFds(a.get(), {});
  int flags = 0;
  EXPECT_TRUE(Receive(b.get(), 2, &flags).empty());
}

// A sender that passes more descriptors than the receiver has room for: the kernel closes the
// surplus and sets MSG_CTRUNC; those that arrived are still owned.
TEST(TakeReceivedFdsTest, TruncatedControlStillOwnsWhatArrived) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]);
  UniqueFd b(sv[1]);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SendFds(a.get(), std::vector<int>(8, null.get()));
  int flags = 0;
  std::vector<UniqueFd> got = Receive(b.get(), 2, &flags);
  EXPECT_NE(flags & MSG_CTRUNC, 0);
  EXPECT_LE(got.size(), 2u);
  for (const UniqueFd& fd : got) EXPECT_TRUE(IsOpen(fd.get()));
}

TEST(SendWithFdsTest, MoreThanTheLimitIsRefusedWithEinval) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]);
  UniqueFd b(sv[1]);
  const std::vector<int> fds(kMaxSentFds + 1, a.get());
  errno = 0;
  EXPECT_EQ(SendWithFds(a.get(), "x", fds), -1);
  EXPECT_EQ(errno, EINVAL);
}

// The receive every socket of the jail uses: the bytes, the descriptors (close-on-exec), a
// truncated message flagged, and nothing waiting under MSG_DONTWAIT is EAGAIN, not a block.
TEST(ReceiveWithFdsTest, BytesDescriptorsTruncationAndNothingWaiting) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]);
  UniqueFd b(sv[1]);
  const int sent[] = {a.get()};
  ASSERT_EQ(SendWithFds(a.get(), "hello", sent), 5);
  char data[16];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
  msghdr msg;
  ASSERT_EQ(ReceiveWithFds(b.get(), data, control, &msg), 5);
  EXPECT_EQ(std::string_view(data, 5), "hello");
  EXPECT_EQ(msg.msg_iov, nullptr);
  std::vector<UniqueFd> got = TakeReceivedFds(msg);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(::fcntl(got[0].get(), F_GETFD) & FD_CLOEXEC, 0);

  ASSERT_EQ(SendWithFds(a.get(), "hello", {}), 5);
  ASSERT_EQ(ReceiveWithFds(b.get(), std::span<char>(data, 2), control, &msg), 2);
  EXPECT_NE(msg.msg_flags & MSG_TRUNC, 0);

  errno = 0;
  EXPECT_EQ(ReceiveWithFds(b.get(), data, control, &msg, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
}

}  // namespace
}  // namespace ckptscan::base
