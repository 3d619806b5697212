// The daemon's unix socket (issue 7): gRPC cannot tell who is on the other end of a unix socket
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
// over. A connection is handed to gRPC only once it has sent its first byte: one that sends
// nothing within first_byte_timeout is closed (an idle connection would otherwise hold a
// descriptor forever; past the descriptor limit nobody can connect). At the cap, a new
// connection displaces the oldest silent one (so silent connections cannot lock callers out),
// or, when every connection is gRPC's, is closed at accept. gRPC then closes connections without
// calls after --max-connection-idle (GRPC_ARG_MAX_CONNECTION_IDLE_MS, daemon/main.cc). Refusals and
// closes are logged, at most one line a second with their counts ("unix_connections").
//
// Thread-safe: Start() runs the accept loop on its own thread; PeerOf may be called from any.
#ifndef CKPTSCAN_DAEMON_UNIX_LISTENER_H_
#define CKPTSCAN_DAEMON_UNIX_LISTENER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/unique_fd.h"

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
  // How long a new connection may stay silent before it is closed (--first-byte-timeout).
  absl::Duration first_byte_timeout = absl::Seconds(30);
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
  // An accepted connection that has not sent anything yet.
  struct Pending {
    base::UniqueFd fd;
    PeerCred cred;
    ino_t inode = 0;
    absl::Time deadline;
  };

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
  size_t SweepHanded();
  // Logs the refusals and silent closes counted since the last line, at most once a second.
  void LogCounts();

  const std::string path_;
  const UnixListenerLimits limits_;
  base::UniqueFd lock_;
  base::UniqueFd socket_;
  base::UniqueFd wake_;  // eventfd: Stop() wakes the loop
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, Handed> peers_;
  bool stopped_ = false;
  // Loop thread only: counts since the last "unix_connections" log line.
  uint64_t refused_ = 0;
  uint64_t silent_closed_ = 0;
  absl::Time last_log_ = absl::InfinitePast();
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_UNIX_LISTENER_H_
