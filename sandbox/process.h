// Process primitives the host side of the jail starts its processes with: a worker per job
// (sandbox/spawner.h) and the fork-server helpers (sandbox/fork_client.h).
//
// Thread-safe.
#ifndef CKPTSCAN_SANDBOX_PROCESS_H_
#define CKPTSCAN_SANDBOX_PROCESS_H_

#include <spawn.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "sandbox/protocol.h"

namespace ckptscan::sandbox {

// Sources are moved to descriptors at or above this before the dup2 actions, so that no dup2
// onto 0, 1 or 3 can clobber another source.
inline constexpr int kFirstSourceFd = kOutputFd + 1;

// `fd` itself when it is at or above kFirstSourceFd, else a close-on-exec duplicate there.
absl::StatusOr<base::UniqueFd> AboveHandedSlots(base::UniqueFd fd);

// Blocks until `pid` has ended; returns its wait status.
int Reap(pid_t pid);

// posix_spawn of `path` with `actions`, argv `args`, no environment, an empty signal mask and
// every signal at its default action: how each process of the jail is started (a worker per
// job, or a fork-server helper). `what` names it in the error.
absl::StatusOr<pid_t> SpawnClean(const std::string& path, const posix_spawn_file_actions_t* actions,
                                 const std::vector<std::string>& args, const char* what);

}  // namespace ckptscan::sandbox

#endif  // CKPTSCAN_SANDBOX_PROCESS_H_
