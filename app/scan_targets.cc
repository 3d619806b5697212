#include "app/scan_targets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace ckptscan::app {
namespace {

ScanTarget File(std::string path) {
  ScanTarget t;
  t.kind = ScanTarget::Kind::kFile;
  t.path = std::move(path);
  return t;
}

ScanTarget Unreadable(std::string path, absl::Status status) {
  ScanTarget t;
  t.kind = ScanTarget::Kind::kUnreadable;
  t.path = std::move(path);
  t.status = std::move(status);
  return t;
}

ScanTarget Skipped(std::string path, std::string reason) {
  ScanTarget t;
  t.kind = ScanTarget::Kind::kSkipped;
  t.path = std::move(path);
  t.reason = std::move(reason);
  return t;
}

std::string SpecialFileReason(mode_t mode) {
  if (S_ISFIFO(mode)) return "FIFO, not a regular file";
  if (S_ISSOCK(mode)) return "socket, not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device, not a regular file";
  return "not a regular file";
}

// The first of `excludes` that matches `relative`, or nullptr.
const std::string* Excluded(std::string_view relative, const std::vector<std::string>& excludes) {
  const std::string rel(relative);
  for (const std::string& pattern : excludes) {
    if (::fnmatch(pattern.c_str(), rel.c_str(), 0) == 0) return &pattern;
  }
  return nullptr;
}

// Walks `root` (a directory) with an explicit stack; appends what it finds to
// `out`, sorted.
void WalkDirectory(const std::string& root, const struct stat& root_st,
                   const std::vector<std::string>& excludes, std::vector<ScanTarget>* out) {
  const size_t root_prefix = root.back() == '/' ? root.size() : root.size() + 1;
  std::vector<ScanTarget> found;
  std::set<std::pair<dev_t, ino_t>> visited = {{root_st.st_dev, root_st.st_ino}};
  // The root was named by the user and may be a symlink; below it, O_NOFOLLOW
  // makes sure a directory swapped for a symlink after fstatat is not followed.
  std::vector<std::string> pending = {root};
  bool is_root = true;
  while (!pending.empty()) {
    const std::string dir = std::move(pending.back());
    pending.pop_back();
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (is_root ? 0 : O_NOFOLLOW);
    is_root = false;
    const int fd = ::open(dir.c_str(), flags);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      found.push_back(
          Unreadable(dir, absl::ErrnoToStatus(err, absl::StrCat("open directory ", dir))));
      continue;
    }
    absl::Cleanup close_dir = [d] { ::closedir(d); };
    const std::string prefix = dir.back() == '/' ? dir : dir + "/";
    while (true) {
      errno = 0;
      const struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        const int err = errno;
        if (err != 0) {
          found.push_back(
              Unreadable(dir, absl::ErrnoToStatus(err, absl::StrCat("read directory ", dir))));
        }
        break;
      }
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = prefix + std::string(name);
      if (const std::string* pattern =
              Excluded(std::string_view(path).substr(root_prefix), excludes)) {
        found.push_back(Skipped(std::move(path), "excluded by --exclude " + *pattern));
        continue;
      }
      struct stat lst;
      if (::fstatat(::dirfd(d), e->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        const int err = errno;
        found.push_back(Unreadable(path, absl::ErrnoToStatus(err, absl::StrCat("stat ", path))));
        continue;
      }
      if (S_ISDIR(lst.st_mode)) {
        if (visited.insert({lst.st_dev, lst.st_ino}).second) pending.push_back(std::move(path));
        continue;
      }
      if (S_ISREG(lst.st_mode)) {
        found.push_back(File(std::move(path)));
        continue;
      }
      if (S_ISLNK(lst.st_mode)) {
        struct stat st;
        if (::stat(path.c_str(), &st) != 0) {
          const int err = errno;
          found.push_back(Unreadable(
              path,
              absl::ErrnoToStatus(err, absl::StrCat("dangling or unreadable symlink ", path))));
        } else if (S_ISDIR(st.st_mode)) {
          found.push_back(Skipped(std::move(path), "symlink to a directory, not followed"));
        } else if (S_ISREG(st.st_mode)) {
          found.push_back(File(std::move(path)));
        } else {
          found.push_back(
              Skipped(std::move(path), "symlink to a " + SpecialFileReason(st.st_mode)));
        }
        continue;
      }
      found.push_back(Skipped(std::move(path), SpecialFileReason(lst.st_mode)));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const ScanTarget& a, const ScanTarget& b) { return a.path < b.path; });
  for (ScanTarget& t : found) out->push_back(std::move(t));
}

}  // namespace

std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths,
                                        const std::vector<std::string>& excludes) {
  std::vector<ScanTarget> out;
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      out.push_back(Unreadable(path, absl::ErrnoToStatus(err, absl::StrCat("stat ", path))));
    } else if (S_ISDIR(st.st_mode)) {
      WalkDirectory(path, st, excludes, &out);
    } else {
      out.push_back(File(path));
    }
  }
  return out;
}

}  // namespace ckptscan::app
