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

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace ckptscan::daemon {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

// RFC 9113 section 3.4: the client connection preface is this magic, then a SETTINGS frame.
constexpr std::string_view kPrefaceMagic = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kFrameHeader = 9;
constexpr uint8_t kSettingsType = 0x4;
constexpr size_t kMaxSettingsPayload = 16384;  // SETTINGS_MAX_FRAME_SIZE's initial value
// How often a connection that sent part of the preface is looked at again (its bytes stay
// unread, so poll would report it readable at once).
constexpr absl::Duration kPartialTick = absl::Milliseconds(20);

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path,
                                                                 mode_t mode,
                                                                 UnixListenerLimits limits) {
  if (limits.max_connections == 0) {
    return absl::InvalidArgumentError("the unix socket's connection cap must be at least 1");
  }
  if (limits.max_connections_per_uid == 0 ||
      limits.max_connections_per_uid > limits.max_connections) {
    return absl::InvalidArgumentError(
        absl::StrCat("the unix socket's per-uid connection cap must be 1 to ",
                     limits.max_connections, " (the connection cap)"));
  }
  if (limits.reserved >= limits.max_connections) {
    return absl::InvalidArgumentError(
        absl::StrCat("the unix socket's places reserved for privileged uids must be under ",
                     limits.max_connections, " (the connection cap)"));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path \"", path, "\" must be 1 to ",
                                                   sizeof(addr.sun_path) - 1, " bytes long"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());

  const std::string lock_path = path + ".lock";
  base::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock.valid()) return Errno("open", lock_path);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::AlreadyExistsError(
          absl::StrCat("another ckptscand is serving ", path, " (it holds ", lock_path, ")"));
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
      new UnixListener(path, limits, std::move(lock), std::move(sock), std::move(wake)));
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
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  (void)::unlink(path_.c_str());
}

void UnixListener::Loop(grpc::Server* server) {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (true) {
    fds.assign({{socket_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}});
    absl::Time next = absl::InfiniteFuture();
    for (const Pending& p : pending) {
      // One that sent part of the preface is only watched for hang-ups, and peeked at each tick.
      fds.push_back({p.fd.get(), static_cast<short>(p.peeked == 0 ? POLLIN : 0), 0});
      next = std::min(next, p.peeked == 0 ? p.deadline : absl::Now() + kPartialTick);
    }
    // Wake for the first silent connection's deadline, and to log counts held back.
    if (refused_ + silent_closed_ + refused_per_uid_ + not_http2_ != 0) {
      next = std::min(next, last_log_ + absl::Seconds(1));
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(next - absl::Now(), absl::Milliseconds(1))), 0,
          1 << 30));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    // A connection that sent the whole preface goes to gRPC; one that sent something else, hung
    // up, or did not finish the preface by its deadline, is closed (its UniqueFd).
    const absl::Time now = absl::Now();
    std::vector<Pending> silent;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const short events = fds[i + 2].revents;
      const bool hung_up = (events & ~POLLIN) != 0;
      if ((events & POLLIN) != 0 || (p.peeked != 0 && !hung_up)) {
        const Preface preface = PeekPreface(&p);
        if (preface == Preface::kComplete) {
          {
            // Recorded before gRPC sees the descriptor: a number is reused only after gRPC
            // closed the previous connection on it, so the entry is always this connection's.
            absl::MutexLock lock(&mu_);
            peers_[p.fd.get()] = Handed{p.cred, p.inode};
          }
          grpc::AddInsecureChannelFromFd(server, p.fd.release());
          continue;
        }
        if (preface == Preface::kNotHttp2) {
          ++not_http2_;
          continue;
        }
      }
      if (hung_up) continue;  // hung up before the preface was whole
      if (now >= p.deadline) {
        ++silent_closed_;
      } else {
        silent.push_back(std::move(p));
      }
    }
    pending.swap(silent);
    if ((fds[0].revents & POLLIN) != 0) Accept(&pending);
    LogCounts();
  }
}

UnixListener::Preface UnixListener::PeekPreface(Pending* p) {
  unsigned char buf[kPrefaceMagic.size() + kFrameHeader + kMaxSettingsPayload];
  const ssize_t n = ::recv(p->fd.get(), buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? Preface::kPartial : Preface::kNotHttp2;
  if (n == 0) return Preface::kNotHttp2;  // end of stream before the preface
  p->peeked = static_cast<size_t>(n);
  const size_t magic = std::min(p->peeked, kPrefaceMagic.size());
  if (std::memcmp(buf, kPrefaceMagic.data(), magic) != 0) return Preface::kNotHttp2;
  const size_t header = kPrefaceMagic.size();
  if (p->peeked < header + kFrameHeader) return Preface::kPartial;
  const size_t length =
      (size_t{buf[header]} << 16) | (size_t{buf[header + 1]} << 8) | size_t{buf[header + 2]};
  const uint32_t stream = ((uint32_t{buf[header + 5]} & 0x7f) << 24) |
                          (uint32_t{buf[header + 6]} << 16) | (uint32_t{buf[header + 7]} << 8) |
                          uint32_t{buf[header + 8]};
  if (buf[header + 3] != kSettingsType || (buf[header + 4] & 0x1) != 0 || stream != 0 ||
      length % 6 != 0 || length > kMaxSettingsPayload) {
    return Preface::kNotHttp2;
  }
  return p->peeked < header + kFrameHeader + length ? Preface::kPartial : Preface::kComplete;
}

void UnixListener::Accept(std::vector<Pending>* pending) {
  const auto privileged = [this](uid_t uid) { return limits_.privileged_uids.contains(uid); };
  // Connections gRPC has closed since the last round are forgotten once per round (an fstat
  // each): a flood of connects must not cost a sweep per connection.
  (void)SweepHanded();
  // A burst is taken in one round (the backlog is 128), each checked against the caps.
  for (int round = 0; round < 64; ++round) {
    // Non-blocking, as AddInsecureChannelFromFd requires (a blocking one times out silently).
    base::UniqueFd fd(::accept4(socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // let descriptors free up
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    struct stat st;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        ::fstat(fd.get(), &st) != 0) {
      continue;
    }
    // Count the connections open now: all, those of unprivileged uids, and this uid's.
    const bool mine_privileged = privileged(cred.uid);
    size_t total = pending->size();
    size_t others = 0;
    size_t mine = 0;
    const auto count = [&](uid_t uid, int delta) {
      others += privileged(uid) ? 0 : delta;
      mine += uid == cred.uid ? delta : 0;
    };
    {
      absl::MutexLock lock(&mu_);
      total += peers_.size();
      for (const auto& [unused, handed] : peers_) count(handed.cred.uid, 1);
    }
    for (const Pending& p : *pending) count(p.cred.uid, 1);
    // Makes room by closing the oldest silent connection `may_displace` allows: a flood of
    // silent connections then only displaces itself, while a real caller's (which speaks at
    // once) gets through.
    const auto displace = [&](auto may_displace) {
      const auto victim = std::find_if(pending->begin(), pending->end(), may_displace);
      if (victim == pending->end()) return false;
      count(victim->cred.uid, -1);
      --total;
      pending->erase(victim);
      ++silent_closed_;
      return true;
    };
    if (mine >= limits_.max_connections_per_uid &&
        !displace([&](const Pending& p) { return p.cred.uid == cred.uid; })) {
      ++refused_per_uid_;  // closed here: this uid's share is all gRPC's
      continue;
    }
    // An unprivileged uid never displaces a privileged uid's connection.
    if ((total >= limits_.max_connections ||
         (!mine_privileged && others >= limits_.max_connections - limits_.reserved)) &&
        !displace([&](const Pending& p) { return mine_privileged || !privileged(p.cred.uid); })) {
      ++refused_;  // closed here: over the cap, every connection it may displace is gRPC's
      continue;
    }
    pending->push_back(Pending{std::move(fd), PeerCred{cred.pid, cred.uid, cred.gid}, st.st_ino,
                               absl::Now() + limits_.first_byte_timeout});
  }
}

size_t UnixListener::SweepHanded() {
  absl::MutexLock lock(&mu_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    struct stat st;
    const bool alive =
        ::fstat(it->first, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == it->second.inode;
    it = alive ? std::next(it) : peers_.erase(it);
  }
  return peers_.size();
}

void UnixListener::LogCounts() {
  const absl::Time now = absl::Now();
  if (refused_ + silent_closed_ + refused_per_uid_ + not_http2_ == 0 ||
      now - last_log_ < absl::Seconds(1)) {
    return;
  }
  size_t handed = 0;
  {
    absl::MutexLock lock(&mu_);
    handed = peers_.size();
  }
  LogLine("unix_connections", "warning")
      .Int("refused_over_cap", refused_)
      .Int("refused_over_uid_cap", refused_per_uid_)
      .Int("closed_silent", silent_closed_)
      .Int("closed_not_http2", not_http2_)
      .Int("open", handed)
      .Int("max_connections", limits_.max_connections)
      .Int("max_connections_per_uid", limits_.max_connections_per_uid)
      .Int("reserved", limits_.reserved)
      .Num("first_byte_timeout_seconds", absl::ToDoubleSeconds(limits_.first_byte_timeout))
      .Emit();
  refused_ = 0;
  silent_closed_ = 0;
  refused_per_uid_ = 0;
  not_http2_ = 0;
  last_log_ = now;
}

std::optional<PeerCred> UnixListener::PeerOf(std::string_view peer) const {
  if (!peer.starts_with("fd:")) return std::nullopt;
  int fd = -1;
  if (!absl::SimpleAtoi(absl::string_view(peer.data() + 3, peer.size() - 3), &fd))
    return std::nullopt;
  absl::MutexLock lock(&mu_);
  const auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second.cred;
}

}  // namespace ckptscan::daemon
