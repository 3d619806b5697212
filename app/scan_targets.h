// Expands the paths given to `ckptscan scan` into the files to scan.
//
// A path named on the command line is taken as given: symlinks are followed
// (the user chose it), a directory is walked, anything else is a file to scan
// (ScanFileInProcess refuses what is not a regular file, so it becomes an ERROR
// entry). Inside a directory, walked without recursion and without following
// symlinked directories:
//   - regular files, and symlinks to regular files, are scanned;
//   - symlinks to directories are skipped and reported (never followed: no
//   loops, no escape);
//   - FIFOs, sockets and devices are skipped and reported;
//   - dangling symlinks and unreadable directories are kUnreadable (ERROR
//   entries).
// The entries of one command-line directory are sorted by path (bytewise), so
// the same tree gives the same order.
// `excludes` (scan --exclude) are fnmatch(3) patterns, flags 0 (`*` also matches
// '/'), matched against an entry's path relative to the command-line directory
// it was found in ("sub/x.bin"). A matching file is kSkipped ("excluded by
// --exclude PATTERN"); a matching directory is kSkipped once and not entered.
// Paths named on the command line themselves are never excluded. Command-line paths keep their
// order. Not thread-safe (reads the filesystem, no shared state).
#ifndef CKPTSCAN_APP_SCAN_TARGETS_H_
#define CKPTSCAN_APP_SCAN_TARGETS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ckptscan::app {

struct ScanTarget {
  enum class Kind { kFile, kUnreadable, kSkipped };
  Kind kind = Kind::kFile;
  std::string path;
  absl::Status status;  // kUnreadable: why
  std::string reason;   // kSkipped: why, e.g. "symlink to a directory, not followed"
};

std::vector<ScanTarget> ExpandScanPaths(const std::vector<std::string>& paths,
                                        const std::vector<std::string>& excludes = {});

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_SCAN_TARGETS_H_
