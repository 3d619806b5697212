// UniqueFd: the sole owner of one file descriptor. Move-only; closes on destruction.
// WriteAll / PwriteAll: the one loop that writes a whole buffer to a descriptor.
// SendWithFds / TakeReceivedFds: one message with descriptors (SCM_RIGHTS) sent, and ownership
// of the descriptors a recvmsg(2) brought.
//
// Pass it by value to hand ownership over (sandbox2's FDCloser, leveldb's file owners).
// -1 means "no descriptor". Thread-compatible.
//
//   base::UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd.valid()) return absl::ErrnoToStatus(errno, "open");
//   Consume(std::move(fd));  // closed by the consumer, not here
#ifndef CKPTSCAN_BASE_UNIQUE_FD_H_
#define CKPTSCAN_BASE_UNIQUE_FD_H_

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ckptscan::base {

class UniqueFd final {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  [[nodiscard]] int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any; EINTR is not retried: Linux always frees the
  // descriptor) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Writes all of `data` to `fd` (at `offset` for PwriteAll, leaving the file offset alone),
// retrying short writes and EINTR. Errors carry errno and start with `what` ("write the
// output: No space left on device"); a write that makes no progress is DataLoss.
absl::Status WriteAll(int fd, std::string_view data, std::string_view what = "write");
absl::Status PwriteAll(int fd, uint64_t offset, std::string_view data,
                       std::string_view what = "write");

// Most descriptors SendWithFds passes in one message.
inline constexpr size_t kMaxSentFds = 8;

// One sendmsg(2) of `data` on `sock` with copies of `fds` (none: no control message), without
// SIGPIPE (MSG_NOSIGNAL), retried on EINTR. Returns what sendmsg returned, errno set on -1;
// more than kMaxSentFds descriptors is -1 with EINVAL.
ssize_t SendWithFds(int sock, std::string_view data, std::span<const int> fds);

// One recvmsg(2) on `sock` into `data`, with `control` (aligned as a cmsghdr) for the
// descriptors that come with it, MSG_CMSG_CLOEXEC | `flags`, retried on EINTR. `*msg` is
// filled in (msg_flags, and the control messages for TakeReceivedFds). Returns what recvmsg
// returned, errno set on -1.
ssize_t ReceiveWithFds(int sock, std::span<char> data, std::span<char> control, msghdr* msg,
                       int flags = 0);

// Every descriptor the SCM_RIGHTS messages of `msg` carry, owned: whatever else is wrong with
// the message, none is left open unowned. Only for a `msg` a recvmsg(2) filled in (it returned
// >= 0): after a failed one, the control buffer holds whatever it held before.
std::vector<UniqueFd> TakeReceivedFds(const msghdr& msg);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_UNIQUE_FD_H_
