// Starting a worker and collecting its fate: the trusted side of the jail.
//
// Start() uses posix_spawn (vfork + exec: safe in a multi-threaded process; the trusted side
// never forks) with an empty environment, an empty signal mask and every signal at its default
// action (POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF). The worker gets exactly the
// descriptors of protocol/protocol.h (adddup2 onto 0, 1 and 3; everything else is closed by
// the file actions and again by the worker; the spawner's own descriptors are O_CLOEXEC).
//
// Wait() reads the result pipe with poll() against the wall-clock deadline, feeding a
// FrameReader; on the deadline or on a frame over its cap it kills the worker with SIGKILL.
// It always reaps the worker, then maps its fate to a Result (fail closed: only exit 0 with a
// whole frame is kOk). A WorkerProcess destroyed without Wait() is killed and reaped too.
//
// Thread-safe: workers may be started and waited for from several threads at once. Start a
// worker from a thread that outlives it: die-with-parent (PR_SET_PDEATHSIG) fires when the
// spawning *thread* exits.
//
// With SpawnOptions::fork_server, Start() does not spawn: it asks the fork server
// (ForkServer below; worker/fork_server.h on the other side) for a child, which gets the same
// descriptors and runs the same job. Wait() then reads the result pipe the same way, kills at
// the deadline through the child's pidfd, and takes the exit status from the job's status
// pipe, which the server writes once it has reaped the child. A status pipe that ends without a
// status (the server died) is kFailed: fail closed.
//
//   absl::StatusOr<WorkerProcess> w = WorkerProcess::Start(options, std::move(input_fd), {});
//   Result r = w.ok() ? std::move(*w).Wait() : ...;
#ifndef CKPTSCAN_TRUSTED_SPAWNER_H_
#define CKPTSCAN_TRUSTED_SPAWNER_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "protocol/protocol.h"
#include "trusted/result.h"

namespace ckptscan::sandbox {

// How a jailed job's process comes to be.
enum class SpawnMode {
  kForkServer,   // forked by this process's fork server (ForkServer::Shared)
  kSpawnPerJob,  // posix_spawn of the worker binary per job
};

// A fork server: one `WORKER --fork-server=PID` helper process, started with posix_spawn like a
// worker (empty environment, empty signal mask, default dispositions) and handed one end of a
// socketpair(AF_UNIX, SOCK_SEQPACKET) as its only descriptor. Fork() sends it one job and gets
// back the pidfd of the child it forked for it (protocol/protocol.h, "The fork server").
//
// A helper that has died (a failed send or receive, EOF, no reply within kForkReplyTimeout) is
// killed, reaped and started again, and the request retried once, with the caller's fresh
// pipes (Fork returns Unavailable: "retry"). Restarts are counted.
//
// Thread-safe: one request and its reply at a time (a mutex); jobs run concurrently. The helper
// is spawned from a thread the ForkServer owns, so that its die-with-parent (which fires when
// the spawning *thread* exits) lasts as long as the ForkServer.
class ForkServer final {
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

    ForkServer* get() const { return server_; }
    ForkServer* operator->() const { return server_; }
    void Release();

   private:
    friend class ForkServer;
    explicit Lease(ForkServer* server) : server_(server) {}
    ForkServer* server_ = nullptr;
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

  explicit ForkServer(std::string worker_path);
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;
  ~ForkServer();  // kills and reaps the helper (its children die with it)

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

struct SpawnOptions {
  std::string worker_path;        // absolute or relative path of the binary (no PATH search)
  std::vector<std::string> args;  // argv[1..]
  absl::Duration timeout = absl::Seconds(60);  // wall clock, from Start() to reaped
  uint64_t max_frame_bytes = kMaxFrameBytes;
  // Polled at least every kCancelPollInterval while the worker runs (may be empty): true kills
  // the worker, and the result is kCancelled (a daemon's caller that went away or gave up).
  std::function<bool()> cancelled;
  // When set, the job's process is forked by this fork server instead of spawned.
  ForkServer* fork_server = nullptr;
};

inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

class WorkerProcess final {
 public:
  // `input` becomes the worker's descriptor 0; `output`, when valid, its descriptor 3.
  // Both are closed in the caller once the worker has them.
  static absl::StatusOr<WorkerProcess> Start(const SpawnOptions& options, base::UniqueFd input,
                                             base::UniqueFd output);

  WorkerProcess(WorkerProcess&& other) noexcept;
  WorkerProcess& operator=(WorkerProcess&& other) = delete;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  ~WorkerProcess();  // kills and reaps a worker nobody waited for

  // The worker's pid (in this process's pid namespace).
  pid_t pid() const;

  // Blocks until the worker has ended (or is killed at the deadline) and is reaped.
  Result Wait() &&;

 private:
  WorkerProcess(pid_t pid, base::UniqueFd result_pipe, absl::Time start, absl::Time deadline,
                uint64_t max_frame_bytes, std::function<bool()> cancelled);
  static absl::StatusOr<WorkerProcess> StartForked(const SpawnOptions& options,
                                                   base::UniqueFd input, base::UniqueFd output);
  // Reads what the status pipe holds: 1 = the whole wait status, 0 = not yet, -1 = the pipe
  // ended without one (the fork server died) or held more.
  int PollStatus(int* status);
  // PollStatus until it is not 0 or `until` passes; true with the status.
  bool ReadStatus(absl::Time until, int* status);

  pid_t pid_ = -1;
  base::UniqueFd pipe_;
  absl::Time start_;
  absl::Time deadline_;
  uint64_t max_frame_bytes_ = kMaxFrameBytes;
  std::function<bool()> cancelled_;
  // Fork-server children only: their pidfd (kill, liveness) and the status pipe's read end.
  base::UniqueFd pidfd_;
  base::UniqueFd status_pipe_;
  std::string status_bytes_;
};

// Start + Wait. A worker that cannot be started is kFailed with the reason.
Result RunWorker(const SpawnOptions& options, base::UniqueFd input, base::UniqueFd output);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_TRUSTED_SPAWNER_H_
