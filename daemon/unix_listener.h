// The daemon's unix socket: gRPC cannot tell who is on the other end of a unix socket
// (grpc/grpc#28755: LocalServerCredentials never asks SO_PEERCRED), so this listener accepts
// connections itself, records each peer's credentials (SO_PEERCRED) under the name gRPC will
// give the connection ("fd:N"), and only then hands it to gRPC (AddInsecureChannelFromFd; the
// descriptor must be non-blocking). Handlers look the caller up with PeerOf(ctx->peer()).
//
// Bind() first takes an exclusive flock on PATH.lock (a second daemon would otherwise unlink
// and re-bind the path, silently stealing it from a running one), then replaces a stale socket,
// binds, sets the socket's mode, and listens. Stop() stops accepting and removes the socket;
// the lock is held until the listener is destroyed.
//
// Bounded (UnixListenerLimits): at most max_connections connections at once, counting those
// gRPC holds (a connection counts until gRPC has closed its descriptor) and those not yet handed
// over. A connection is handed to gRPC only once it has sent the whole HTTP/2 client preface
// (the 24-byte magic and a SETTINGS frame, RFC 9113 section 3.4; read with MSG_PEEK, so gRPC
// reads them again): one that has not within first_byte_timeout is closed, and one that sends
// anything else is closed at once. (gRPC's own handshake timeout does not apply to descriptors
// handed over with AddInsecureChannelFromFd, which skip the handshakers: a connection that
// sent one byte stayed until --max-connection-idle.) Each uid holds at most
// max_connections_per_uid connections (silent or gRPC's); one more of that uid displaces
// its oldest silent one, or is closed at accept. The last `reserved` places are for the privileged
// uids (the daemon's, root, the
// --admin-uid uids): other uids together hold at most max_connections - reserved, so no caller
// can lock the operator out. At the cap, a new connection displaces the oldest silent one it
// may displace (any for a privileged uid, another unprivileged one's otherwise), or is closed
// at accept. gRPC then closes connections without calls after --max-connection-idle
// (GRPC_ARG_MAX_CONNECTION_IDLE_MS, daemon/main.cc). Refusals and closes are logged, at most one
// line a second with their counts ("unix_connections").
//
// Thread-safe: Start() runs the accept loop on its own thread; PeerOf may be called from any.
#ifndef CKPTSCAN_DAEMON_UNIX_LISTENER_H_
#define CKPTSCAN_DAEMON_UNIX_LISTENER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace grpc {
class Server;
}

namespace ckptscan::daemon {

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct UnixListenerLimits {
  // Connections at once (ckptscand --max-unix-connections); well under the descriptor limit.
  uint32_t max_connections = 256;
  // How long a new connection may take to send the HTTP/2 client preface (--first-byte-timeout).
  absl::Duration first_byte_timeout = absl::Seconds(30);
  // Connections of one uid at once (--max-unix-connections-per-uid); at most max_connections.
  uint32_t max_connections_per_uid = 64;
  // Places only `privileged_uids` may take (--unix-connections-reserved); below max_connections.
  uint32_t reserved = 16;
  std::set<uid_t> privileged_uids;
};

class UnixListener final {
 public:
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path, mode_t mode,
                                                            UnixListenerLimits limits = {});
  ~UnixListener();

  // Accepts on a thread of its own, handing every connection to `server` (already started).
  void Start(grpc::Server* server);
  // Stops accepting (connections already handed over stay open) and unlinks the socket.
  void Stop();

  // The credentials of the connection gRPC calls `peer` ("fd:N"), if it came through here.
  std::optional<PeerCred> PeerOf(std::string_view peer) const;

  const std::string& path() const { return path_; }

 private:
  // A connection gRPC holds: its peer, and the socket's inode (the descriptor number is
  // reused once gRPC closes it; the inode tells whether it is still this connection).
  struct Handed {
    PeerCred cred;
    ino_t inode = 0;
  };
  // An accepted connection that has not sent the whole HTTP/2 client preface yet.
  struct Pending {
    base::UniqueFd fd;
    PeerCred cred;
    ino_t inode = 0;
    absl::Time deadline;
    size_t peeked = 0;  // bytes waiting unread; polled again only on the next tick
  };
  enum class Preface { kComplete, kPartial, kNotHttp2 };
  // What the bytes waiting on `p` hold (MSG_PEEK: they stay for gRPC).
  static Preface PeekPreface(Pending* p);

  UnixListener(std::string path, UnixListenerLimits limits, base::UniqueFd lock,
               base::UniqueFd socket, base::UniqueFd wake)
      : path_(std::move(path)),
        limits_(limits),
        lock_(std::move(lock)),
        socket_(std::move(socket)),
        wake_(std::move(wake)) {}
  void Loop(grpc::Server* server);
  void Accept(std::vector<Pending>* pending);
  // Forgets the handed connections gRPC has closed; returns how many remain.
  size_t SweepHanded() ABSL_LOCKS_EXCLUDED(mu_);
  // Logs the refusals and silent closes counted since the last line, at most once a second.
  void LogCounts();

  const std::string path_;
  const UnixListenerLimits limits_;
  base::UniqueFd lock_;
  base::UniqueFd socket_;
  base::UniqueFd wake_;  // eventfd: Stop() wakes the loop
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::map<int, Handed> peers_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Loop thread only: counts since the last "unix_connections" log line.
  uint64_t refused_ = 0;
  uint64_t silent_closed_ = 0;
  uint64_t refused_per_uid_ = 0;
  uint64_t not_http2_ = 0;
  absl::Time last_log_ = absl::InfinitePast();
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_UNIX_LISTENER_H_
