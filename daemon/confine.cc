#include "daemon/confine.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>

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
  return absl::PermissionDeniedError(
      absl::StrCat(Quoted(path), " is not under a configured root"));
}

absl::StatusOr<base::UniqueFd> ConfinedRoots::Resolve(std::string_view path,
                                                      uint64_t flags) const {
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
          absl::StrCat(Quoted(path), " leaves its root (through \"..\", an absolute path or a "
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

}  // namespace ckptscan::daemon
