// ckptscand: the scanning daemon model hubs call (docs/daemon.md). main reads the flags
// (daemon/flags.h) and runs the server they describe (daemon/server.h): the Scanner and Admin
// services (proto/ckptscan/v1/scanner.proto), gRPC health checking and, with --reflection, server
// reflection, on a unix socket (default) and/or TCP with TLS.
//
// With no flags it runs as is on a laptop: a per-user socket, the built-in rules, a signing key
// generated on first start in the state directory, uploads only (by-path calls need --root).
//
// Signals: SIGTERM/SIGINT drain, SIGHUP reloads the rules. They are blocked here before any
// thread starts, so every thread inherits the mask and the server's sigwait is the only taker.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "base/strings.h"
#include "daemon/flags.h"
#include "daemon/log.h"
#include "daemon/server.h"

namespace ckptscan::daemon {
namespace {

// Stack size of every thread the daemon starts: the handlers do not recurse, and with a thread
// per call in flight glibc's default (RLIMIT_STACK, usually 8 MiB) is what ran out first under a
// tight address-space limit (tests/faults/daemon_faults_test.py, scenario B).
constexpr size_t kThreadStackBytes = 2 << 20;

int Fail(std::string_view message) {
  LogLine("startup", "error").Str("error", message).Emit();
  std::fprintf(stderr, "ckptscand: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

// The process-wide settings, before any thread exists: the signal mask, SIGPIPE ignored, the
// soft descriptor limit raised to the hard one (systemd starts services at 1024; every
// connection and job holds descriptors), two malloc arenas (glibc's arena per thread grows
// resident memory with the peak concurrency ever seen; bench/README.md, "Daemon load"), and
// the threads' stack size.
struct DescriptorLimit {
  bool known = false;
  rlim_t soft_at_start = 0, soft = 0, hard = 0;
};

DescriptorLimit SetUpProcess(sigset_t* signals) {
  DescriptorLimit limit;
  RouteLibraryLogs();
  sigemptyset(signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(signals, s);
  pthread_sigmask(SIG_BLOCK, signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    const rlim_t before = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (before != lim.rlim_max && ::setrlimit(RLIMIT_NOFILE, &lim) != 0) lim.rlim_cur = before;
    limit = {true, before, lim.rlim_cur, lim.rlim_max};
  }
  ::mallopt(M_ARENA_MAX, 2);
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) == 0) {
    pthread_attr_setstacksize(&attr, kThreadStackBytes);
    pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  }
  return limit;
}

int Main(int argc, char** argv) {
  sigset_t signals;
  const DescriptorLimit limit = SetUpProcess(&signals);
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) return Fail(base::StdView(line.status().message()));
  if (!line->config.has_value()) return line->exit_code;
  // Logged once the daemon is to start: --help and --version print only what they were asked.
  if (limit.known) {
    LogLine("descriptor_limit")
        .Int("soft_at_start", limit.soft_at_start)
        .Int("soft", limit.soft)
        .Int("hard", limit.hard)
        .Emit();
  }
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(*std::move(line->config));
  if (!server.ok()) return Fail(base::StdView(server.status().message()));
  (*server)->Serve(signals);
  return 0;
}

}  // namespace
}  // namespace ckptscan::daemon

int main(int argc, char** argv) { return ckptscan::daemon::Main(argc, argv); }
