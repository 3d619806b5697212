// ckptscand assembled from its DaemonConfig (daemon/flags.h) and run: the engine (its jail
// checked by a self-test job before anything listens), the state and spool directories, the
// signing key, the roots (kept apart from the daemon's own files), the job slots and metrics,
// the unix listener, the gRPC server (TCP with TLS) and the plaintext health server.
//
// Serve() logs "listening", then waits for signals (blocked in every thread; sigwait here):
// SIGHUP reloads the rules (a bad file leaves the old rules in force); SIGTERM or SIGINT drain:
// health NOT_SERVING, no new job or connection, running jobs get the drain time, then the calls
// still open are cancelled (which kills their workers).
//
// Thread-compatible: built and served from main's thread.
#ifndef CKPTSCAN_DAEMON_SERVER_H_
#define CKPTSCAN_DAEMON_SERVER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "app/engine.h"
#include "daemon/flags.h"
#include "daemon/job_slots.h"
#include "daemon/metrics.h"
#include "daemon/reflection_guard.h"
#include "daemon/service.h"
#include "daemon/unix_listener.h"

namespace ckptscan::daemon {

// protobuf's and gRPC's own messages as the daemon's JSON log lines (main, before anything).
void RouteLibraryLogs();

class Server final {
 public:
  // Everything that can refuse to start, in order: the engine and its jail, the directories,
  // the key, the roots, the listeners. The error says what refused.
  static absl::StatusOr<std::unique_ptr<Server>> Start(DaemonConfig config);
  ~Server();

  // Serves until SIGTERM or SIGINT (one of `signals`, blocked in every thread), then drains.
  void Serve(const sigset_t& signals);

 private:
  explicit Server(DaemonConfig config) : config_(std::move(config)) {}
  absl::Status Build();
  absl::Status Listen();
  void LogListening() const;
  void Drain();

  DaemonConfig config_;
  std::unique_ptr<app::Engine> engine_;
  std::string jail_layers_;
  std::unique_ptr<JobSlots> slots_;
  std::shared_ptr<Metrics> metrics_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<ScannerService> scanner_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<ReflectionGuard> reflection_guard_;
  std::unique_ptr<ReflectionGuard> watch_guard_;  // health Watch streams, both servers
  std::unique_ptr<UnixListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  std::vector<grpc::HealthCheckServiceInterface*> healths_;
  int tcp_port_ = 0;
  int health_port_ = 0;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_SERVER_H_
