#include "app/scan_targets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "app/path_glob.h"

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

struct Pattern {
  PathGlob glob;
  bool include = false;
  bool used = false;
};

// The patterns of one walk and what they did.
class Selection {
 public:
  explicit Selection(std::vector<Pattern>* patterns) : patterns_(patterns) {}

  // Why `relative` is skipped, or "" to keep it.
  std::string Skip(std::string_view relative, bool is_dir) {
    for (Pattern& p : *patterns_) {
      if (!p.include && p.glob.Matches(relative, is_dir)) {
        p.used = true;
        return "excluded by --exclude " + p.glob.pattern();
      }
    }
    if (is_dir) return "";
    bool any_include = false;
    bool included = false;
    for (Pattern& p : *patterns_) {
      if (!p.include) continue;
      any_include = true;
      if (p.glob.MatchesUnder(relative, false)) {
        p.used = true;
        included = true;
      }
    }
    return any_include && !included ? "not matched by --include" : "";
  }

 private:
  std::vector<Pattern>* patterns_;
};

bool IsIndexName(std::string_view name) {
  constexpr std::string_view kSuffix = ".index.json";
  return name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix;
}

bool IsSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A Hugging Face hub cache folder of one repository: models--ORG--NAME (datasets--, spaces--)
// with a snapshots folder. `path` names the folder, `name` is its last component.
bool IsHfCacheRepo(const std::string& path, std::string_view name) {
  const bool named = name.rfind("models--", 0) == 0 || name.rfind("datasets--", 0) == 0 ||
                     name.rfind("spaces--", 0) == 0;
  if (!named) return false;
  struct stat st;
  return ::lstat((path + "/snapshots").c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What a snapshot's link names in the cache's blobs folder: the blob's SHA-256 (LFS files are
// stored under their digest; other blobs under git's SHA-1, which is not checked).
std::string BlobDigest(const std::string& link) {
  char target[4096];
  const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return "";
  const std::string_view t(target, static_cast<size_t>(n));
  const size_t slash = t.rfind('/');
  if (slash == std::string_view::npos) return "";
  const std::string_view name = t.substr(slash + 1);
  const std::string_view dir = t.substr(0, slash);
  const bool in_blobs =
      dir == "blobs" || (dir.size() > 6 && dir.substr(dir.size() - 6) == "/blobs");
  return in_blobs && IsSha256Hex(name) ? std::string(name) : "";
}

struct PendingDir {
  std::string path;
  bool hf_cache = false;  // inside a cache repository folder's snapshots
};

// Walks `root` (a directory) with an explicit stack; appends what it finds to
// `out`, sorted.
void WalkDirectory(const std::string& root, const struct stat& root_st, Selection* selection,
                   std::vector<ScanTarget>* out) {
  const size_t root_prefix = root.back() == '/' ? root.size() : root.size() + 1;
  std::vector<ScanTarget> found;
  std::set<std::pair<dev_t, ino_t>> visited = {{root_st.st_dev, root_st.st_ino}};
  // The root was named by the user and may be a symlink; below it, O_NOFOLLOW
  // makes sure a directory swapped for a symlink after fstatat is not followed.
  std::vector<PendingDir> pending;
  {
    std::string_view trimmed = root;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
    const size_t slash = trimmed.rfind('/');
    const std::string_view name =
        slash == std::string_view::npos ? trimmed : trimmed.substr(slash + 1);
    pending.push_back(PendingDir{root, IsHfCacheRepo(std::string(trimmed), name)});
  }
  bool is_root = true;
  while (!pending.empty()) {
    const PendingDir dir = std::move(pending.back());
    pending.pop_back();
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (is_root ? 0 : O_NOFOLLOW);
    is_root = false;
    const int fd = ::open(dir.path.c_str(), flags);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      found.push_back(Unreadable(
          dir.path, absl::ErrnoToStatus(err, absl::StrCat("open directory ", dir.path))));
      continue;
    }
    absl::Cleanup close_dir = [d] { ::closedir(d); };
    const std::string prefix = dir.path.back() == '/' ? dir.path : dir.path + "/";
    while (true) {
      errno = 0;
      const struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        const int err = errno;
        if (err != 0) {
          found.push_back(Unreadable(
              dir.path, absl::ErrnoToStatus(err, absl::StrCat("read directory ", dir.path))));
        }
        break;
      }
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = prefix + std::string(name);
      const std::string_view relative = std::string_view(path).substr(root_prefix);
      if (name == ".git") {
        found.push_back(Skipped(std::move(path), "git metadata (.git): no model loader reads it"));
        continue;
      }
      if (dir.hf_cache && (name == "blobs" || name == "refs" || name == ".no_exist")) {
        found.push_back(Skipped(
            std::move(path),
            name == "blobs"
                ? "Hugging Face cache blobs: scanned through the snapshots that link to them"
                : "Hugging Face cache bookkeeping, not model files"));
        continue;
      }
      struct stat lst;
      if (::fstatat(::dirfd(d), e->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        const int err = errno;
        found.push_back(Unreadable(path, absl::ErrnoToStatus(err, absl::StrCat("stat ", path))));
        continue;
      }
      bool is_dir = S_ISDIR(lst.st_mode);
      struct stat st = lst;
      if (S_ISLNK(lst.st_mode) && ::stat(path.c_str(), &st) == 0) is_dir = S_ISDIR(st.st_mode);
      std::string note;
      if (std::string why = selection->Skip(relative, is_dir); !why.empty()) {
        if (is_dir || !IsIndexName(name)) {
          found.push_back(Skipped(std::move(path), std::move(why)));
          continue;
        }
        note = why + ", but scanned: a sharded checkpoint's index is always checked";
      }
      if (S_ISDIR(lst.st_mode)) {
        if (visited.insert({lst.st_dev, lst.st_ino}).second) {
          pending.push_back(PendingDir{path, IsHfCacheRepo(path, name)});
        }
        continue;
      }
      if (S_ISREG(lst.st_mode)) {
        ScanTarget t = File(std::move(path));
        t.note = std::move(note);
        found.push_back(std::move(t));
        continue;
      }
      if (S_ISLNK(lst.st_mode)) {
        if (::stat(path.c_str(), &st) != 0) {
          const int err = errno;
          found.push_back(Unreadable(
              path,
              absl::ErrnoToStatus(err, absl::StrCat("dangling or unreadable symlink ", path))));
        } else if (S_ISDIR(st.st_mode)) {
          found.push_back(Skipped(std::move(path), "symlink to a directory, not followed"));
        } else if (S_ISREG(st.st_mode)) {
          std::string digest = BlobDigest(path);
          ScanTarget t = File(std::move(path));
          t.note = std::move(note);
          t.expected_sha256 = std::move(digest);
          found.push_back(std::move(t));
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

absl::StatusOr<Expansion> ExpandScanPaths(const std::vector<std::string>& paths,
                                          const WalkOptions& options) {
  std::vector<Pattern> patterns;
  for (const auto& [list, include] :
       {std::pair{&options.excludes, false}, std::pair{&options.includes, true}}) {
    for (const std::string& p : *list) {
      absl::StatusOr<PathGlob> glob = PathGlob::Create(p);
      if (!glob.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(include ? "--include " : "--exclude ", glob.status().message()));
      }
      patterns.push_back(Pattern{*std::move(glob), include, false});
    }
  }
  Selection selection(&patterns);
  Expansion out;
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      out.targets.push_back(
          Unreadable(path, absl::ErrnoToStatus(err, absl::StrCat("stat ", path))));
    } else if (S_ISDIR(st.st_mode)) {
      WalkDirectory(path, st, &selection, &out.targets);
    } else {
      out.targets.push_back(File(path));
    }
  }
  for (const Pattern& p : patterns) {
    if (!p.used) {
      out.unmatched.push_back(
          absl::StrCat(p.include ? "--include " : "--exclude ", p.glob.pattern()));
    }
  }
  return out;
}

std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths) {
  return ExpandScanPaths(paths, WalkOptions{})->targets;
}

std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths,
                                        const std::vector<std::string>& excludes) {
  WalkOptions options;
  for (const std::string& e : excludes) {
    if (PathGlob::Create(e).ok()) options.excludes.push_back(e);
  }
  return ExpandScanPaths(paths, options)->targets;
}

}  // namespace ckptscan::app
