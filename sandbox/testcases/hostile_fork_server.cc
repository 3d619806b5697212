// A fork server that lies to the trusted side, for jail_test's ForkServerReplyTest. Started by
// sandbox::ForkClient exactly as the real helper is (`PATH --fork-server=PID`, the socket as
// descriptor 3); which lie it tells is the last component of PATH (the test names a symbolic
// link after it):
//   extra_fds      error 0 with three descriptors instead of one pidfd
//   short_reply    one byte instead of a ForkReply
//   error_with_fd  an errno and a descriptor beside it
//   eof            closes the socket at the first request
// It forks nothing: no job ever runs. Test code only.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"

namespace {

constexpr int kSocket = 3;

std::string_view Bytes(const int32_t& v) {
  return std::string_view(reinterpret_cast<const char*>(&v), sizeof(v));
}

void Send(std::string_view data, const std::vector<int>& fds) {
  (void)ckptscan::base::SendWithFds(kSocket, data, fds);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 1) return 2;
  std::string_view name = argv[0];
  if (const size_t slash = name.rfind('/'); slash != std::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  static char request[64 << 10];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  for (;;) {
    iovec iov{request, sizeof(request)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(kSocket, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) return 0;  // the trusted side is gone
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int32_t ok = 0;
    const int32_t einval = EINVAL;
    if (name == "extra_fds") {
      Send(Bytes(ok), {null, null, null});
    } else if (name == "short_reply") {
      Send("x", {});
    } else if (name == "error_with_fd") {
      Send(Bytes(einval), {null});
    } else {  // eof, or a name it does not know
      return 0;
    }
    ::close(null);
  }
}
