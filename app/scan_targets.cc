#include "app/scan_targets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "app/path_glob.h"
#include "base/limit_status.h"

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

// A FIFO, socket or device where a file could be (or a link to one): a loader given the path
// reads whatever its other end gives at load time, so it is an ERROR entry, never a skip.
ScanTarget SpecialFile(std::string path, std::string_view what) {
  std::string message = absl::StrCat(std::string(what), ": a loader reading ", path,
                                     " gets whatever its other end gives; not verified");
  return Unreadable(std::move(path), absl::FailedPreconditionError(message));
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
  // A symlink to a folder (opened through the link; its identity is checked once open), and
  // the folder link every file below it was reached through ("" for none).
  bool link = false;
  std::string via;
};

using DirId = std::pair<dev_t, ino_t>;

// One walk of a command-line folder: the folders it holds first (their own links left for
// later), then every folder link found, each target once by device and inode, so that a
// folder reached both directly and through a link is listed under its own path.
class Walk {
 public:
  Walk(const std::string& root, const struct stat& root_st, Selection* selection,
       size_t max_entries)
      : root_prefix_(root.back() == '/' ? root.size() : root.size() + 1),
        selection_(selection),
        max_entries_(max_entries) {
    visited_.emplace(DirId{root_st.st_dev, root_st.st_ino}, root);
    std::string_view trimmed = root;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
    const size_t slash = trimmed.rfind('/');
    const std::string_view name =
        slash == std::string_view::npos ? trimmed : trimmed.substr(slash + 1);
    // The root was named by the user and may be a symlink: it is opened following it.
    PendingDir top{root, IsHfCacheRepo(std::string(trimmed), name), true, {}};
    pending_.push_back(std::move(top));
    root_ = true;
  }

  void Run(std::vector<ScanTarget>* out) {
    size_t next_link = 0;
    while (!stopped_) {
      if (!pending_.empty()) {
        PendingDir dir = std::move(pending_.back());
        pending_.pop_back();
        Directory(dir);
        continue;
      }
      if (next_link == links_.size()) break;
      // Folder links in path order (those found so far), so that the same tree gives the
      // same walk.
      std::sort(links_.begin() + static_cast<std::ptrdiff_t>(next_link), links_.end(),
                [](const PendingDir& a, const PendingDir& b) { return a.path < b.path; });
      pending_.push_back(std::move(links_[next_link++]));
    }
    std::sort(found_.begin(), found_.end(),
              [](const ScanTarget& a, const ScanTarget& b) { return a.path < b.path; });
    for (ScanTarget& t : found_) out->push_back(std::move(t));
  }

 private:
  // Counts one entry against max_entries; false (and an ERROR entry, once) past it.
  bool Count(const std::string& path) {
    if (++entries_ <= max_entries_) return true;
    stopped_ = true;
    found_.push_back(Unreadable(
        path, base::LimitError(absl::StrCat("the walk stopped at ", path, ": more than ",
                                            max_entries_,
                                            " files and folders (scan --max-walk-entries)"),
                               "max_walk_entries", max_entries_)));
    return false;
  }

  void Directory(const PendingDir& dir) {
    // Below the root, O_NOFOLLOW makes sure a folder swapped for a symlink after fstatat is
    // not followed; a folder link is opened through the link, and judged by what it opened.
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (dir.link ? 0 : O_NOFOLLOW);
    const bool is_root = root_;
    root_ = false;
    const int fd = ::open(dir.path.c_str(), flags);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (d == nullptr) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      found_.push_back(Unreadable(
          dir.path, absl::ErrnoToStatus(err, absl::StrCat("open directory ", dir.path))));
      return;
    }
    absl::Cleanup close_dir = [d] { ::closedir(d); };
    if (dir.link && !is_root) {
      struct stat st;
      if (::fstat(::dirfd(d), &st) != 0) {
        const int err = errno;
        found_.push_back(
            Unreadable(dir.path, absl::ErrnoToStatus(err, absl::StrCat("stat ", dir.path))));
        return;
      }
      const auto [it, fresh] = visited_.emplace(DirId{st.st_dev, st.st_ino}, dir.path);
      if (!fresh) {
        found_.push_back(Skipped(dir.path, absl::StrCat("symlink to a folder walked as ",
                                                        it->second, " (each folder once)")));
        return;
      }
    }
    const std::string prefix = dir.path.back() == '/' ? dir.path : dir.path + "/";
    std::vector<PendingDir> links;
    while (!stopped_) {
      errno = 0;
      const struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        const int err = errno;
        if (err != 0) {
          found_.push_back(Unreadable(
              dir.path, absl::ErrnoToStatus(err, absl::StrCat("read directory ", dir.path))));
        }
        break;
      }
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string path = prefix + std::string(name);
      if (!Count(path)) break;
      Entry(d, dir, name, std::move(path), &links);
    }
    for (PendingDir& l : links) links_.push_back(std::move(l));
  }

  void Entry(DIR* d, const PendingDir& dir, std::string_view name, std::string path,
             std::vector<PendingDir>* links) {
    const std::string_view relative = std::string_view(path).substr(root_prefix_);
    if (name == ".git") {
      found_.push_back(Skipped(std::move(path), "git metadata (.git): no model loader reads it"));
      return;
    }
    if (dir.hf_cache && (name == "blobs" || name == "refs" || name == ".no_exist")) {
      found_.push_back(Skipped(
          std::move(path),
          name == "blobs"
              ? "Hugging Face cache blobs: scanned through the snapshots that link to them"
              : "Hugging Face cache bookkeeping, not model files"));
      return;
    }
    struct stat lst;
    if (::fstatat(::dirfd(d), std::string(name).c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
      const int err = errno;
      found_.push_back(Unreadable(path, absl::ErrnoToStatus(err, absl::StrCat("stat ", path))));
      return;
    }
    // A link's target, stat'ed once: for the selection (a link to a folder is a folder) and
    // for what the link is below.
    struct stat st = lst;
    int link_err = 0;
    if (S_ISLNK(lst.st_mode) && ::stat(path.c_str(), &st) != 0) link_err = errno;
    const bool is_dir = link_err == 0 && S_ISDIR(st.st_mode);
    std::string note;
    if (std::string why = selection_->Skip(relative, is_dir); !why.empty()) {
      if (is_dir || !IsIndexName(name)) {
        found_.push_back(Skipped(std::move(path), std::move(why)));
        return;
      }
      note = why + ", but scanned: a sharded checkpoint's index is always checked";
    }
    if (S_ISDIR(lst.st_mode)) {
      if (visited_.emplace(DirId{lst.st_dev, lst.st_ino}, path).second) {
        pending_.push_back(PendingDir{path, IsHfCacheRepo(path, name), false, dir.via});
      }
      return;
    }
    const auto file = [&](std::string digest) {
      ScanTarget t = File(std::move(path));
      t.note = std::move(note);
      t.via = dir.via;
      t.expected_sha256 = std::move(digest);
      found_.push_back(std::move(t));
    };
    if (S_ISREG(lst.st_mode)) {
      file("");
      return;
    }
    if (S_ISLNK(lst.st_mode)) {
      if (link_err != 0) {
        found_.push_back(Unreadable(
            path,
            absl::ErrnoToStatus(link_err, absl::StrCat("dangling or unreadable symlink ", path))));
      } else if (S_ISDIR(st.st_mode)) {
        // A loader reads through it wherever it points (a skipped folder such as .git or a
        // cache's blobs included): walked after the real folders, each target once.
        PendingDir l{path, IsHfCacheRepo(path, name), true, {}};
        char target[4096];
        const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
        l.via = path;
        if (n > 0) absl::StrAppend(&l.via, " -> ", std::string(target, static_cast<size_t>(n)));
        links->push_back(std::move(l));
      } else if (S_ISREG(st.st_mode)) {
        file(BlobDigest(path));
      } else {
        found_.push_back(SpecialFile(std::move(path), "symlink to a " + SpecialFileReason(st.st_mode)));
      }
      return;
    }
    found_.push_back(SpecialFile(std::move(path), SpecialFileReason(lst.st_mode)));
  }

  const size_t root_prefix_;
  Selection* selection_;
  const size_t max_entries_;
  std::map<DirId, std::string> visited_;  // folders walked (or queued), by identity
  std::vector<PendingDir> pending_;       // real folders still to walk
  std::vector<PendingDir> links_;         // folder links, walked after the real folders
  std::vector<ScanTarget> found_;
  size_t entries_ = 0;
  bool stopped_ = false;
  bool root_ = false;
};

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
      Walk(path, st, &selection, options.max_entries).Run(&out.targets);
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
