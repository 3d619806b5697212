// Expands the paths given to `ckptscan scan` into the files to scan.
//
// A path named on the command line is taken as given: symlinks are followed
// (the user chose it), a directory is walked, anything else is a file to scan
// (ScanFileInProcess refuses what is not a regular file, so it becomes an ERROR
// entry). Inside a directory, walked without recursion (an explicit stack), every path a
// loader can reach is found:
//   - regular files, and symlinks to regular files (inside or outside the folder), are
//   scanned;
//   - symlinks to directories are followed wherever they point (outside the folder, into a
//   skipped .git or cache blobs folder), after the folder's own directories: each directory
//   is walked once, by device and inode, so a loop ends and a folder reached both directly
//   and through a link is listed under its own path (the link is kSkipped, naming it). A
//   file found below a folder link names it in `via`;
//   - FIFOs, sockets and devices, and links to them, are kUnreadable (a loader reads what
//   their other end gives when it loads);
//   - dangling symlinks and unreadable directories are kUnreadable (ERROR
//   entries);
//   - past WalkOptions::max_entries files and folders (links can reach a whole filesystem)
//   the walk stops with a kUnreadable entry naming the limit, so the scan is not verified.
// The entries of one command-line directory are sorted by path (bytewise), so
// the same tree gives the same order.
// Selection (scan --include / --exclude, app/path_glob.h): gitignore-style patterns matched
// against an entry's path relative to the command-line folder it was found in ("sub/x.bin").
// A file or folder an exclude matches is kSkipped ("excluded by --exclude PATTERN"; a folder
// once, not entered); with includes, a file that no include matches (nor a folder above it)
// is kSkipped ("not matched by --include"). A file named *.index.json that a pattern would
// skip is scanned anyway (a sharded checkpoint's index is always checked) and `note` says so.
// Paths named on the command line themselves are never excluded.
// Repository layouts: a `.git` entry (a git checkout's metadata, which no loader reads) is
// kSkipped. A Hugging Face cache folder (models--ORG--NAME, datasets--..., spaces--... holding
// a `snapshots` folder) is walked through its snapshots only: `blobs` (reached through the
// snapshots' links), `refs` and `.no_exist` are kSkipped. A snapshot's link into blobs/ whose
// blob is named by a SHA-256 gets that digest as `expected_sha256` (the scan compares it).
// Command-line paths keep their order. Not thread-safe (reads the filesystem, no shared state).
#ifndef CKPTSCAN_APP_SCAN_TARGETS_H_
#define CKPTSCAN_APP_SCAN_TARGETS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::app {

struct ScanTarget {
  enum class Kind { kFile, kUnreadable, kSkipped };
  Kind kind = Kind::kFile;
  std::string path;
  absl::Status status;          // kUnreadable: why
  std::string reason;           // kSkipped: why, e.g. "symlink to a directory, not followed"
  std::string note;             // kFile: why it is scanned although a pattern matched it
  std::string expected_sha256;  // kFile: the digest its name promises (a cache blob), or ""
  std::string via;              // kFile: the folder link it was reached through, "LINK -> TARGET"
};

inline constexpr size_t kDefaultMaxWalkEntries = 1000000;

struct WalkOptions {
  std::vector<std::string> includes;  // scan --include (none: every file)
  std::vector<std::string> excludes;  // scan --exclude
  // scan --max-walk-entries: files and folders one command-line folder's walk may list.
  size_t max_entries = kDefaultMaxWalkEntries;
};

struct Expansion {
  std::vector<ScanTarget> targets;
  // Patterns that matched nothing anywhere ("--exclude PATTERN"), to warn about.
  std::vector<std::string> unmatched;
};

// Fails (InvalidArgument) only for a pattern PathGlob refuses.
absl::StatusOr<Expansion> ExpandScanPaths(const std::vector<std::string>& paths,
                                          const WalkOptions& options);
// The same without patterns.
std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths);
// Excludes only (tests and older callers); a pattern PathGlob refuses is ignored.
std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths,
                                        const std::vector<std::string>& excludes);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_SCAN_TARGETS_H_
