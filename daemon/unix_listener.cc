#include "daemon/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ckptscan::daemon {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path,
                                                                 mode_t mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path \"", path, "\" must be 1 to ", sizeof(addr.sun_path) - 1, " bytes long"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());

  const std::string lock_path = path + ".lock";
  base::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock.valid()) return Errno("open", lock_path);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::AlreadyExistsError(absl::StrCat(
          "another ckptscand is serving ", path, " (it holds ", lock_path, ")"));
    }
    return Errno("flock", lock_path);
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(lock.get(), 0) != 0 || ::pwrite(lock.get(), pid.data(), pid.size(), 0) < 0) {
    return Errno("write", lock_path);
  }

  // We hold the lock, so a socket at the path is a dead daemon's: replace it. Anything else
  // at the path is not ours to remove.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat(path, " exists and is not a socket"));
    }
    if (::unlink(path.c_str()) != 0) return Errno("unlink stale socket", path);
  }
  base::UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return Errno("socket", path);
  // The socket is created with the mode the umask leaves; narrow it before anyone can connect.
  const mode_t old_umask = ::umask(0177);
  const int bound = ::bind(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  ::umask(old_umask);
  if (bound != 0) return Errno("bind", path);
  if (::chmod(path.c_str(), mode) != 0) return Errno("chmod", path);
  if (::listen(sock.get(), 128) != 0) return Errno("listen", path);
  base::UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Errno("eventfd for", path);
  return std::unique_ptr<UnixListener>(
      new UnixListener(path, std::move(lock), std::move(sock), std::move(wake)));
}

UnixListener::~UnixListener() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void UnixListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Loop(server); });
}

void UnixListener::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  (void)::unlink(path_.c_str());
}

void UnixListener::Loop(grpc::Server* server) {
  while (true) {
    pollfd fds[2] = {{socket_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // Non-blocking, as AddInsecureChannelFromFd requires (a blocking one times out silently).
    const int fd = ::accept4(socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // let descriptors free up
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(fd);
      continue;
    }
    {
      // Recorded before gRPC sees the descriptor: a number is reused only after gRPC closed the
      // previous connection on it, so the entry is always this connection's.
      std::lock_guard<std::mutex> lock(mu_);
      peers_[fd] = PeerCred{cred.pid, cred.uid, cred.gid};
    }
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

std::optional<PeerCred> UnixListener::PeerOf(std::string_view peer) const {
  if (!peer.starts_with("fd:")) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(absl::string_view(peer.data() + 3, peer.size() - 3), &fd)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ckptscan::daemon
