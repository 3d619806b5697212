#include "base/unique_fd.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/strings.h"

namespace ckptscan::base {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) (void)::close(fd_);
  fd_ = fd;
}

namespace {

// `offset` < 0: write(2) at the file offset; otherwise pwrite(2) there.
absl::Status WriteLoop(int fd, int64_t offset, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    const ssize_t n = offset < 0 ? ::write(fd, data.data(), data.size())
                                 : ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, AbslView(what));
    }
    if (n == 0) return absl::DataLossError(absl::StrCat(AbslView(what), ": no progress"));
    data.remove_prefix(static_cast<size_t>(n));
    if (offset >= 0) offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteAll(int fd, std::string_view data, std::string_view what) {
  return WriteLoop(fd, -1, data, what);
}

absl::Status PwriteAll(int fd, uint64_t offset, std::string_view data, std::string_view what) {
  if (offset > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(what), ": offset out of range"));
  }
  return WriteLoop(fd, static_cast<int64_t>(offset), data, what);
}

ssize_t SendWithFds(int sock, std::string_view data, std::span<const int> fds) {
  if (fds.size() > kMaxSentFds) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSentFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t ReceiveWithFds(int sock, std::span<char> data, std::span<char> control, msghdr* msg,
                       int flags) {
  *msg = msghdr{};
  iovec iov{data.data(), data.size()};
  msg->msg_iov = &iov;
  msg->msg_iovlen = 1;
  msg->msg_control = control.data();
  msg->msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(sock, msg, MSG_CMSG_CLOEXEC | flags);
  } while (n < 0 && errno == EINTR);
  // The iovec dies with this frame: msg_iov is not for the caller to follow.
  msg->msg_iov = nullptr;
  msg->msg_iovlen = 0;
  return n;
}

std::vector<UniqueFd> TakeReceivedFds(const msghdr& msg) {
  std::vector<UniqueFd> fds;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  return fds;
}

}  // namespace ckptscan::base
