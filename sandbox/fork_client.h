// ForkClient: the trusted side's handle on a fork-server helper, which forks one jailed child
// per job (docs/sandbox.md, "The fork server"). The helper's own loop is ForkServer
// (sandbox/worker/fork_server.h); the request and reply are sandbox/protocol.h's.
#ifndef CKPTSCAN_SANDBOX_FORK_CLIENT_H_
#define CKPTSCAN_SANDBOX_FORK_CLIENT_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace ckptscan::sandbox {

// The host side's end of a fork server (sandbox/worker/fork_server.h is the other): one `WORKER
// --fork-server=PID` helper process, started with posix_spawn like a worker (empty environment,
// empty signal mask, default dispositions) and handed one end of a socketpair(AF_UNIX,
// SOCK_SEQPACKET) as its only descriptor. Fork() sends it one job and gets back the pidfd of the
// child it forked for it (sandbox/protocol.h, "The fork server").
//
// A helper that has died (a failed send or receive, EOF, no reply within kForkReplyTimeout) is
// killed, reaped and started again, and the request retried once, with the caller's fresh
// pipes (Fork returns Unavailable: "retry"; NotDelivered() says whether the request reached the
// old helper). Restarts are counted.
//
// Thread-safe: one request and its reply at a time (a mutex); jobs run concurrently. The helper
// is spawned from a thread the ForkClient owns, so that its die-with-parent (which fires when
// the spawning *thread* exits) lasts as long as the ForkClient.
class ForkClient final {
 public:
  // A fork server held for one job: it counts as busy until the lease is destroyed.
  class Lease final {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : server_(std::exchange(other.server_, nullptr)) {}
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { Release(); }

    ForkClient* get() const { return server_; }
    ForkClient* operator->() const { return server_; }
    void Release();

   private:
    friend class ForkClient;
    explicit Lease(ForkClient* server) : server_(server) {}
    ForkClient* server_ = nullptr;
  };

  // This process's fork servers of `worker_path` (each started on first use, never destroyed):
  // the one with the fewest jobs, for one job. One helper forks for one request at a time, so
  // concurrent jobs (scan -j, the daemon's) each get a helper of their own: a new one is added
  // when every helper has a job, up to SharedPoolSize().
  static Lease Shared(const std::string& worker_path);
  // Starts every one of the SharedPoolSize() servers of `worker_path` and its helper now (the
  // daemon, before it serves), so that none is started later from a serving thread.
  static absl::Status StartShared(const std::string& worker_path);
  // The live helpers' pids among Shared(worker_path)'s servers (tests).
  static std::vector<pid_t> SharedHelperPids(const std::string& worker_path);
  // How many shared servers a worker path may have: the CPUs this process could run on when it
  // first asked, at most kMaxSharedForkServers.
  static size_t SharedPoolSize();
  static constexpr size_t kMaxSharedForkServers = 16;

  explicit ForkClient(std::string worker_path);
  ForkClient(const ForkClient&) = delete;
  ForkClient& operator=(const ForkClient&) = delete;
  ~ForkClient();  // kills and reaps the helper (its children die with it)

  // One job: `args` are what a per-job worker gets as argv[1..]; `output` may be -1. The
  // descriptors stay the caller's (the helper receives copies). Unavailable: the helper was
  // found dead and has been restarted; the caller may retry once with fresh pipes.
  absl::StatusOr<base::UniqueFd> Fork(const std::vector<std::string>& args, int input, int result,
                                      int status, int output) ABSL_LOCKS_EXCLUDED(mu_);

  // The helper's pid (0 when none runs) and how often it was restarted. For tests and metrics.
  pid_t helper_pid() const ABSL_LOCKS_EXCLUDED(mu_);
  int restarts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status EnsureHelperLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopHelperLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // posix_spawn of the helper, run on spawner_ (see the class comment).
  absl::StatusOr<pid_t> SpawnOnOwnThread(int child_end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SpawnerLoop();

  const std::string worker_path_;
  std::atomic<int> leases_{0};  // jobs holding this server (Shared)
  mutable absl::Mutex mu_;
  pid_t helper_ ABSL_GUARDED_BY(mu_) = 0;
  base::UniqueFd socket_ ABSL_GUARDED_BY(mu_);
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_once_ ABSL_GUARDED_BY(mu_) = false;

  // The spawner thread's mailbox: one spawn at a time (callers hold mu_).
  absl::Mutex spawn_mu_;
  int spawn_fd_ ABSL_GUARDED_BY(spawn_mu_) = -1;  // >= 0: a spawn is asked for
  bool spawn_done_ ABSL_GUARDED_BY(spawn_mu_) = false;
  absl::StatusOr<pid_t> spawn_result_ ABSL_GUARDED_BY(spawn_mu_) = 0;
  bool quit_ ABSL_GUARDED_BY(spawn_mu_) = false;
  std::thread spawner_;
};

inline constexpr absl::Duration kForkReplyTimeout = absl::Seconds(10);

// Whether an Unavailable from ForkClient::Fork means the request never reached the lost helper
// (a status payload, not the message): only such a request may be sent again when the job
// holds an output descriptor, whose file offset a child of the old helper may have moved.
bool NotDelivered(const absl::Status& status);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_FORK_CLIENT_H_
