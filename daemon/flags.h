// ckptscand's command line and --config file (docs/daemon.md) read into one DaemonConfig: the
// engine (the flags ckptscan shares, app/engine_flags.h, plus --job-timeout and the frame and
// memory caps), the services' options, the listeners' and the job slots' limits. Every value is
// checked here, before anything starts.
//
// Not thread-safe: main's thread, once.
#ifndef CKPTSCAN_DAEMON_FLAGS_H_
#define CKPTSCAN_DAEMON_FLAGS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "app/engine.h"
#include "daemon/job_slots.h"
#include "daemon/reflection_guard.h"
#include "daemon/service.h"
#include "daemon/unix_listener.h"

namespace ckptscan::daemon {

struct DaemonConfig {
  app::EngineConfig engine;
  ServiceOptions service;
  // Listening: the unix socket (unless no_socket), TCP with TLS, the plaintext health port.
  std::string socket;
  mode_t socket_mode = 0660;
  bool no_socket = false;
  UnixListenerLimits unix_limits;
  std::string tcp;  // HOST:PORT, "" = none
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool require_client_cert = false;
  std::string health_tcp;
  uint32_t metrics_port = 0;  // 0 = off
  std::string metrics_address;
  bool reflection = false;
  ReflectionLimits reflection_limits;
  // Health Watch streams on both servers at once, and their age (--max-health-watches,
  // --health-watch-seconds).
  ReflectionLimits health_watch_limits{.max_streams = 64, .max_stream_age = absl::Seconds(300)};
  // Every server's streams at once on one connection (--max-streams-per-connection:
  // GRPC_ARG_MAX_CONCURRENT_STREAMS) and each server's gRPC memory (--grpc-memory: its
  // ResourceQuota: its buffers under pressure; not a rapid-reset flood, docs/security.md).
  uint32_t max_streams_per_connection = 100;
  uint64_t grpc_memory = 256ull << 20;
  absl::Duration max_connection_age;
  absl::Duration max_connection_idle;
  absl::Duration first_byte_timeout;
  absl::Duration drain;
  // Jobs and uploads.
  uint32_t max_running = 0;
  uint32_t max_queued = 0;
  uint32_t max_jobs_per_caller = 0;
  uint32_t reserved_job_places = 0;  // of max_running + max_queued, for the operator only
  UploadLimits uploads;
  // Files of the daemon's own: by-path roots, the signing key, the state directory.
  std::vector<std::string> roots;
  std::string signing_key;  // "" = STATE_DIR/signing-key.pem, created on first start
  std::string state_dir;
};

// What the command line asks for: run with `config`, or exit now with `exit_code` (0: --help
// or --version printed; 64: a command line CLI11 could not read, its message printed). A value
// the daemon cannot run with is InvalidArgument naming the flag.
struct CommandLine {
  std::optional<DaemonConfig> config;
  int exit_code = 0;
};
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv);

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_FLAGS_H_
