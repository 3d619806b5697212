// The CLI's side of ckptscand (`ckptscan scan|convert --server ADDR`, `ckptscan admin ...`):
// the same reports as the local mode, made by the daemon.
//
// Addresses: "local" (the daemon's default socket for this user, app/paths.h),
// "unix:PATH", or "HOST:PORT" (TLS: --tls-ca verifies the server, default the system's CAs;
// --tls-cert/--tls-key present a client certificate for mTLS).
//
// Files are uploaded by default (the CLI reads the bytes and streams them; it parses nothing),
// which works against any daemon; by path, the daemon opens them beneath its roots.
//
// Thread-compatible.
#ifndef CKPTSCAN_CLIENTS_REMOTE_H_
#define CKPTSCAN_CLIENTS_REMOTE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "ckptscan/v1/scanner.grpc.pb.h"

namespace ckptscan::clients {

struct RemoteOptions {
  std::string address;
  std::string tls_ca;    // PEM file; empty: the system's CAs
  std::string tls_cert;  // PEM client certificate (mTLS)
  std::string tls_key;   // PEM client key (mTLS)
  bool by_path = false;  // send paths instead of bytes
  absl::Duration timeout = absl::Seconds(60);  // per file, as the local --timeout
};

// Connects to the unix socket at `path` (the per-user default of `--server local`) only if
// another local user cannot have planted it: its directory is owned by this user or root and
// writable by nobody else, the socket is owned by this user or root (neither a symlink), and the
// process listening on it (SO_PEERCRED) runs as this user or root. PermissionDenied names what
// failed; Unavailable when nothing is there.
absl::StatusOr<base::UniqueFd> ConnectTrustedLocalSocket(const std::string& path);

class RemoteClient final {
 public:
  // Checks the options and builds the channel (it connects on first use, except for a non-root
  // user's `local` address, which is connected and verified here: ConnectTrustedLocalSocket).
  static absl::StatusOr<std::unique_ptr<RemoteClient>> Create(const RemoteOptions& options);

  // One file's report, by upload or by path (made absolute here; the daemon confines it). The
  // report names the file `path` as given. A failed call is an error status (the caller turns
  // it into an ERROR entry).
  absl::StatusOr<v1::Report> Scan(const std::string& path, const v1::ScanOptions& options);

  // Converts `input` to `output`. By upload, the daemon streams the safetensors bytes back;
  // they are written to an unlinked file beside `output`, checked with the strict validator,
  // and linked (with `replace`, over an existing file), the signature beside it as OUT.sig.
  // By path, the daemon writes both itself beneath its roots.
  absl::StatusOr<v1::ConvertResponse> Convert(const std::string& input, const std::string& output,
                                              const v1::ConvertOptions& options);

  absl::StatusOr<v1::StatusResponse> Status();
  absl::StatusOr<v1::MetricsResponse> Metrics();
  absl::StatusOr<v1::ReloadRulesResponse> ReloadRules();
  absl::StatusOr<v1::PublicKeyResponse> PublicKey();
  // gRPC health checking (grpc.health.v1.Health/Check) of `service` ("" = the whole server):
  // true SERVING, false NOT_SERVING; an error when it cannot be asked or the service is unknown.
  absl::StatusOr<bool> Health(const std::string& service, absl::Duration timeout);

  const std::string& target() const { return target_; }

 private:
  RemoteClient(RemoteOptions options, std::string target, std::shared_ptr<grpc::Channel> channel);
  std::chrono::system_clock::time_point Deadline(uint64_t bytes) const;

  const RemoteOptions options_;
  const std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Scanner::Stub> scanner_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

// "ckptscand at TARGET: CODE: message", for errors from a call.
absl::Status FromGrpc(const grpc::Status& status, const std::string& target);

}  // namespace ckptscan::clients

#endif  // CKPTSCAN_CLIENTS_REMOTE_H_
