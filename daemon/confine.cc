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
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/strings.h"

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

namespace {

// One line of /proc/self/mountinfo (proc(5)): the filesystem's device, the directory of that
// filesystem mounted (a bind mount's source), and where.
struct Mount {
  std::string dev;
  std::string root;
  std::string point;
};

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\\' && i + 3 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7' &&
        in[i + 2] >= '0' && in[i + 2] <= '7' && in[i + 3] >= '0' && in[i + 3] <= '7') {
      out += static_cast<char>(((in[i + 1] - '0') << 6) | ((in[i + 2] - '0') << 3) |
                               (in[i + 3] - '0'));
      i += 3;
    } else {
      out += in[i];
    }
  }
  return out;
}

absl::StatusOr<std::vector<Mount>> ReadMounts() {
  std::FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return absl::ErrnoToStatus(errno, "/proc/self/mountinfo");
  std::vector<Mount> mounts;
  char* line = nullptr;
  size_t cap = 0;
  while (::getline(&line, &cap, f) > 0) {
    // ID PARENT MAJOR:MINOR ROOT POINT ...
    std::vector<std::string_view> fields;
    std::string_view rest(line);
    while (fields.size() < 5) {
      const size_t b = rest.find_first_not_of(' ');
      if (b == std::string_view::npos) break;
      rest.remove_prefix(b);
      const size_t e = rest.find_first_of(" \n");
      fields.push_back(rest.substr(0, e));
      rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
    }
    if (fields.size() == 5) {
      mounts.push_back({std::string(fields[2]), Unescape(fields[3]), Unescape(fields[4])});
    }
  }
  std::free(line);
  std::fclose(f);
  if (mounts.empty()) return absl::FailedPreconditionError("/proc/self/mountinfo lists nothing");
  return mounts;
}

// `path` is `dir` or beneath it (both canonical).
bool Within(std::string_view path, std::string_view dir) {
  if (dir == "/") return true;
  return path == dir ||
         (path.size() > dir.size() && path.substr(0, dir.size()) == dir && path[dir.size()] == '/');
}

// Where `path` lies, symbolic links resolved: the canonical path itself when it exists, else
// the canonical path of the nearest directory above it that does (where it would be created).
struct Located {
  std::string at;
  bool exists = false;
};

Located Locate(std::string at) {
  char resolved[PATH_MAX];
  bool exists = true;
  while (::realpath(at.c_str(), resolved) == nullptr && errno == ENOENT && at != "/" && at != ".") {
    exists = false;
    const size_t slash = at.find_last_of('/');
    at = slash == std::string::npos ? "." : slash == 0 ? "/" : at.substr(0, slash);
  }
  return {::realpath(at.c_str(), resolved) != nullptr ? std::string(resolved) : at, exists};
}

}  // namespace

absl::Status ConfinedRoots::CheckApart(std::string_view what, const std::string& path) const {
  // Symbolic links resolved, so that a key named through a link is judged where it lies. What
  // does not exist yet (a socket before bind, a state directory before mkdir) is judged by the
  // nearest directory above it that does, as its parent: a root that contains that directory
  // would contain it, but a root inside that directory is only its sibling (a socket beside the
  // roots), and nothing created later can contain a root that exists now.
  const Located where = Locate(path);
  const std::string& at = where.at;
  base::UniqueFd fd(::open(at.c_str(), O_PATH | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrCat(base::AbslView(what), " ", Quoted(path)));
  }
  // A file (the key, the socket): itself, then the directory that holds it. A second hard
  // link could lie anywhere, inside a root too: refused.
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, Quoted(at));
  std::vector<Inode> file;
  if (!S_ISDIR(st.st_mode)) {
    if (st.st_nlink > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          base::AbslView(what), " ", Quoted(path), " has ", st.st_nlink,
          " hard links: another name, perhaps beneath a root, reaches it; give it one link"));
    }
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
  // Names the overlap as it is: the root and `what` as configured, and for a path not created
  // yet, the directory it will be created in.
  const std::string created_in =
      where.exists ? std::string() : absl::StrCat(" (to be created in ", Quoted(at), ")");
  const auto refuse = [&](size_t i, std::string_view how) {
    return absl::FailedPreconditionError(absl::StrCat(
        "root ", Quoted(paths_[i]), base::AbslView(how), base::AbslView(what), " ", Quoted(path),
        created_in,
        ": by-path calls could reach it; give the daemon a root apart from its "
        "key, state, spool and socket"));
  };
  for (size_t i = 0; i < fds_.size(); ++i) {
    absl::StatusOr<std::vector<Inode>> root = Ancestry(fds_[i].get());
    if (!root.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("root ", Quoted(paths_[i]), ": ", root.status().message()));
    }
    if (std::find(above->begin(), above->end(), root->front()) != above->end()) {
      return refuse(i, " contains ");
    }
    if (where.exists && std::find(root->begin(), root->end(), above->front()) != root->end()) {
      return refuse(i, " lies inside ");
    }
  }
  // A mount beneath a root (a bind mount above all) can show `path`, or a part of it, there
  // although no ".." leads from one to the other: compared by the filesystem's device and the
  // directory of it that each mount shows. (A path not created yet has no part to show.)
  absl::StatusOr<std::vector<Mount>> mounts = ReadMounts();
  if (!mounts.ok()) return mounts.status();
  const Mount* home = nullptr;  // the mount `at` lies on: the last listed that holds it
  for (const Mount& m : *mounts) {
    if (Within(at, m.point)) home = &m;
  }
  if (home == nullptr) return absl::OkStatus();
  const std::string rest = home->point == "/" ? at : at.substr(home->point.size());
  const std::string in_fs =
      home->root == "/" ? (rest.empty() ? "/" : rest) : absl::StrCat(home->root, rest);
  for (size_t i = 0; i < paths_.size(); ++i) {
    for (const Mount& m : *mounts) {
      if (&m == home || m.dev != home->dev || !Within(m.point, paths_[i])) continue;
      if (Within(in_fs, m.root) || (where.exists && Within(m.root, in_fs))) {
        return refuse(i, absl::StrCat(" shows, through the mount at ", Quoted(m.point), ", "));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::daemon
