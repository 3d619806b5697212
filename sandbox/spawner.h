// Starting a worker and collecting its fate: the trusted side of the jail.
//
// Start() uses posix_spawn (vfork + exec: safe in a multi-threaded process; the trusted side
// never forks) with an empty environment, an empty signal mask and every signal at its default
// action (POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF). The worker gets exactly the
// descriptors of sandbox/protocol.h (adddup2 onto 0, 1 and 3; everything else is closed by
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
// (ForkClient below; sandbox/worker/fork_server.h on the other side) for a child, which gets the
// same descriptors and runs the same job. Wait() then reads the result pipe the same way, kills at
// the deadline through the child's pidfd, and takes the exit status from the job's status
// pipe, which the server writes once it has reaped the child. A status pipe that ends without a
// status (the server died) is kFailed: fail closed.
//
//   absl::StatusOr<WorkerProcess> w = WorkerProcess::Start(options, std::move(input_fd), {});
//   Result r = w.ok() ? std::move(*w).Wait() : ...;
#ifndef CKPTSCAN_SANDBOX_SPAWNER_H_
#define CKPTSCAN_SANDBOX_SPAWNER_H_

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
#include "sandbox/protocol.h"
#include "sandbox/result.h"

namespace ckptscan::sandbox {

class ForkClient;  // sandbox/fork_client.h

// How a jailed job's process comes to be.
enum class SpawnMode {
  kForkServer,   // forked by this process's fork server (ForkClient::Shared)
  kSpawnPerJob,  // posix_spawn of the worker binary per job
};

struct SpawnOptions {
  std::string worker_path;        // absolute or relative path of the binary (no PATH search)
  std::vector<std::string> args;  // argv[1..]
  absl::Duration timeout = absl::Seconds(60);  // wall clock, from Start() to reaped
  uint64_t max_frame_bytes = kMaxFrameBytes;
  // Polled at least every kCancelPollInterval while the worker runs (may be empty): true kills
  // the worker, and the result is kCancelled (a daemon's caller that went away or gave up).
  std::function<bool()> cancelled;
  // When set, the job's process is forked by this fork server instead of spawned.
  ForkClient* fork_server = nullptr;
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

#endif  // CKPTSCAN_SANDBOX_SPAWNER_H_
