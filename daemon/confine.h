// Path confinement for the daemon: a path given over RPC is resolved
// beneath a configured root only, by the kernel, with openat2(2):
//   RESOLVE_BENEATH        no "..", absolute path or absolute symlink leaves the root
//   RESOLVE_NO_MAGICLINKS  no /proc/self/fd-style links
// so that no check-then-open race and no symlink planted in a model folder can reach a file
// outside it. An absolute path must name a configured root (or lie under one, matched by whole
// components after the root was canonicalised at start); a relative path is taken beneath the
// first root. Escapes are PermissionDenied; a kernel without openat2 is Unimplemented (the
// daemon refuses to serve paths rather than fall back to a weaker check).
//
// Thread-safe after Open(): the root descriptors are only read.
//
//   CKPT_ASSIGN_OR_RETURN(daemon::ConfinedRoots roots, daemon::ConfinedRoots::Open({"/srv"}));
//   CKPT_ASSIGN_OR_RETURN(base::UniqueFd fd, roots.OpenForRead(request.path()));
#ifndef CKPTSCAN_DAEMON_CONFINE_H_
#define CKPTSCAN_DAEMON_CONFINE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ckptscan::daemon {

class ConfinedRoots final {
 public:
  // Canonicalises (realpath) and opens every root as an O_PATH directory descriptor.
  static absl::StatusOr<ConfinedRoots> Open(const std::vector<std::string>& roots);

  // A regular file beneath a root, opened O_RDONLY | O_CLOEXEC (O_NONBLOCK: a FIFO never
  // blocks the daemon). Not a regular file: FailedPrecondition.
  absl::StatusOr<base::UniqueFd> OpenForRead(std::string_view path) const;

  // A directory beneath a root (an output's destination), opened O_PATH | O_DIRECTORY.
  absl::StatusOr<base::UniqueFd> OpenDirectory(std::string_view path) const;

  const std::vector<std::string>& roots() const { return paths_; }

  // Refuses a root that contains `path` (the file or directory itself, or its directory when
  // it does not exist yet) or lies beneath it, compared by device and inode up to "/" (so a
  // bind mount or a second spelling does not hide it): by-path calls must never reach what the
  // daemon keeps for itself (`what`: its key, state, spool, socket). FailedPrecondition.
  absl::Status CheckApart(std::string_view what, const std::string& path) const;

 private:
  ConfinedRoots(std::vector<std::string> paths, std::vector<base::UniqueFd> fds)
      : paths_(std::move(paths)), fds_(std::move(fds)) {}

  // The root that `path` names and the rest of it, relative to that root.
  absl::StatusOr<std::pair<int, std::string>> Split(std::string_view path) const;
  absl::StatusOr<base::UniqueFd> Resolve(std::string_view path, uint64_t flags) const;

  std::vector<std::string> paths_;
  std::vector<base::UniqueFd> fds_;
};

}  // namespace ckptscan::daemon

#endif  // CKPTSCAN_DAEMON_CONFINE_H_
