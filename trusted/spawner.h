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
//   absl::StatusOr<WorkerProcess> w = WorkerProcess::Start(options, std::move(input_fd), {});
//   Result r = w.ok() ? std::move(*w).Wait() : ...;
#ifndef CKPTSCAN_TRUSTED_SPAWNER_H_
#define CKPTSCAN_TRUSTED_SPAWNER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "protocol/protocol.h"
#include "trusted/result.h"

namespace ckptscan::sandbox {

struct SpawnOptions {
  std::string worker_path;        // absolute or relative path of the binary (no PATH search)
  std::vector<std::string> args;  // argv[1..]
  absl::Duration timeout = absl::Seconds(60);  // wall clock, from Start() to reaped
  uint64_t max_frame_bytes = kMaxFrameBytes;
  // Polled at least every kCancelPollInterval while the worker runs (may be empty): true kills
  // the worker, and the result is kCancelled (a daemon's caller that went away or gave up).
  std::function<bool()> cancelled;
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

  pid_t pid() const { return pid_; }

  // Blocks until the worker has ended (or is killed at the deadline) and is reaped.
  Result Wait() &&;

 private:
  WorkerProcess(pid_t pid, base::UniqueFd result_pipe, absl::Time start, absl::Time deadline,
                uint64_t max_frame_bytes, std::function<bool()> cancelled);

  pid_t pid_ = -1;
  base::UniqueFd pipe_;
  absl::Time start_;
  absl::Time deadline_;
  uint64_t max_frame_bytes_ = kMaxFrameBytes;
  std::function<bool()> cancelled_;
};

// Start + Wait. A worker that cannot be started is kFailed with the reason.
Result RunWorker(const SpawnOptions& options, base::UniqueFd input, base::UniqueFd output);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_TRUSTED_SPAWNER_H_
