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

#include "absl/status/statusor.h"
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

class UnixListener final {
 public:
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path,
                                                            mode_t mode);
  ~UnixListener();

  // Accepts on a thread of its own, handing every connection to `server` (already started).
  void Start(grpc::Server* server);
  // Stops accepting (connections already handed over stay open) and unlinks the socket.
  void Stop();

  // The credentials of the connection gRPC calls `peer` ("fd:N"), if it came through here.
  std::optional<PeerCred> PeerOf(std::string_view peer) const;

  const std::string& path() const { return path_; }

 private:
  UnixListener(std::string path, base::UniqueFd lock, base::UniqueFd socket, base::UniqueFd wake)
      : path_(std::move(path)),
        lock_(std::move(lock)),
        socket_(std::move(socket)),
        wake_(std::move(wake)) {}
  void Loop(grpc::Server* server);

  const std::string path_;
  base::UniqueFd lock_;
  base::UniqueFd socket_;
  base::UniqueFd wake_;  // eventfd: Stop() wakes the loop
  std::thread thread_;
  mutable std::mutex mu_;
  std::map<int, PeerCred> peers_;
  bool stopped_ = false;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_UNIX_LISTENER_H_
