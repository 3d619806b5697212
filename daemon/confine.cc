#include "daemon/confine.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/escape.h"
#include "core/base/strings.h"

namespace ckptscan::daemon {
namespace {

std::string Quoted(std::string_view path) {
  return absl::StrCat("\"", base::AbslView(base::Escaped(path)), "\"");
}

}  // namespace

absl::StatusOr<ConfinedRoots> ConfinedRoots::Open(const std::vector<std::string>& roots) {
  if (roots.empty()) return absl::InvalidArgumentError("no root configured");
  std::vector<std::string> paths;
  std::vector<base::UniqueFd> fds;
  for (const std::string& root : roots) {
    char resolved[PATH_MAX];
    if (::realpath(root.c_str(), resolved) == nullptr) {
      return absl::ErrnoToStatus(errno, absl::StrCat("root ", Quoted(root)));
    }
    base::UniqueFd fd(::open(resolved, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrCat("root ", Quoted(root)));
    paths.emplace_back(resolved);
    fds.push_back(std::move(fd));
  }
  return ConfinedRoots(std::move(paths), std::move(fds));
}

absl::StatusOr<std::pair<int, std::string>> ConfinedRoots::Split(std::string_view path) const {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("path contains a NUL byte");
  }
  if (path.front() != '/') return std::make_pair(fds_[0].get(), std::string(path));
  for (size_t i = 0; i < paths_.size(); ++i) {
    const std::string& root = paths_[i];
    if (path == root) return std::make_pair(fds_[i].get(), std::string("."));
    const std::string prefix = root == "/" ? root : root + "/";
    if (path.substr(0, prefix.size()) == prefix) {
      std::string rest(path.substr(prefix.size()));
      return std::make_pair(fds_[i].get(), rest.empty() ? std::string(".") : rest);
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(Quoted(path), " is not under a configured root"));
}

absl::StatusOr<base::UniqueFd> ConfinedRoots::Resolve(std::string_view path, uint64_t flags) const {
  absl::StatusOr<std::pair<int, std::string>> split = Split(path);
  if (!split.ok()) return split.status();
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, split->first, split->second.c_str(), &how, sizeof(how));
  if (fd >= 0) return base::UniqueFd(static_cast<int>(fd));
  switch (errno) {
    case EXDEV:
    case ELOOP:
      return absl::PermissionDeniedError(
          absl::StrCat(Quoted(path),
                       " leaves its root (through \"..\", an absolute path or a "
                       "symbolic link)"));
    case ENOSYS:
      return absl::UnimplementedError(
          "this kernel has no openat2(2): paths cannot be confined, so none is opened");
    default:
      return absl::ErrnoToStatus(errno, Quoted(path));
  }
}

absl::StatusOr<base::UniqueFd> ConfinedRoots::OpenForRead(std::string_view path) const {
  absl::StatusOr<base::UniqueFd> fd = Resolve(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return absl::ErrnoToStatus(errno, Quoted(path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(Quoted(path), " is not a regular file"));
  }
  return fd;
}

absl::StatusOr<base::UniqueFd> ConfinedRoots::OpenDirectory(std::string_view path) const {
  return Resolve(path, O_PATH | O_DIRECTORY);
}

namespace {

using Inode = std::pair<dev_t, ino_t>;

// `fd` and every directory above it up to "/", by device and inode; no recursion and at
// most kMaxDepth steps (a directory tree deeper than that is refused by the caller).
constexpr int kMaxDepth = 4096;

absl::StatusOr<std::vector<Inode>> Ancestry(int fd) {
  std::vector<Inode> chain;
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, "stat");
  chain.emplace_back(st.st_dev, st.st_ino);
  base::UniqueFd cur(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    base::UniqueFd up(::openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!up.valid()) return absl::ErrnoToStatus(errno, "open ..");
    if (::fstat(up.get(), &st) != 0) return absl::ErrnoToStatus(errno, "stat ..");
    if (Inode(st.st_dev, st.st_ino) == chain.back()) return chain;  // "/" is its own parent
    chain.emplace_back(st.st_dev, st.st_ino);
    cur = std::move(up);
  }
  return absl::FailedPreconditionError("deeper than 4096 directories");
}

}  // namespace

absl::Status ConfinedRoots::CheckApart(std::string_view what, const std::string& path) const {
  // What does not exist yet (a socket before bind, its directory) is judged by the nearest
  // directory above it that does.
  std::string at = path;
  base::UniqueFd fd(::open(at.c_str(), O_PATH | O_CLOEXEC));
  while (!fd.valid() && errno == ENOENT && at != "/" && at != ".") {
    const size_t slash = at.find_last_of('/');
    at = slash == std::string::npos ? "." : slash == 0 ? "/" : at.substr(0, slash);
    fd = base::UniqueFd(::open(at.c_str(), O_PATH | O_CLOEXEC));
  }
  if (!fd.valid())
    return absl::ErrnoToStatus(errno, absl::StrCat(base::AbslView(what), " ", Quoted(path)));
  // A file (the key, the socket): itself, then the directory that holds it.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, Quoted(at));
  std::vector<Inode> file;
  if (!S_ISDIR(st.st_mode)) {
    file.emplace_back(st.st_dev, st.st_ino);
    const size_t slash = at.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : at.substr(0, slash);
    fd = base::UniqueFd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, Quoted(dir));
  }
  absl::StatusOr<std::vector<Inode>> above = Ancestry(fd.get());
  if (above.ok()) above->insert(above->begin(), file.begin(), file.end());
  if (!above.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(base::AbslView(what), " ", Quoted(path), ": ", above.status().message()));
  }
  for (size_t i = 0; i < fds_.size(); ++i) {
    absl::StatusOr<std::vector<Inode>> root = Ancestry(fds_[i].get());
    if (!root.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("root ", Quoted(paths_[i]), ": ", root.status().message()));
    }
    const bool contains = std::find(above->begin(), above->end(), root->front()) != above->end();
    const bool inside = std::find(root->begin(), root->end(), above->front()) != root->end();
    if (contains || inside) {
      return absl::FailedPreconditionError(
          absl::StrCat("root ", Quoted(paths_[i]), contains ? " contains " : " lies inside ",
                       base::AbslView(what), " ", Quoted(path),
                       ": by-path calls could reach it; give the daemon a root apart from its "
                       "key, state, spool and socket"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::daemon
