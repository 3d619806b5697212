// Scanning a set of files, the same on every surface: the files a scan names (folders walked by
// ExpandScanPaths), the files a --manifest lists with their digests, and the shards every
// sharded checkpoint's index names. `ckptscan scan` (local and --server) and ckptscand's
// ScanPath / ScanUpload all run ScanSet; only the FileSource differs: where the bytes come from
// and who judges them (a jailed worker here, the daemon, ...).
//
// Order: the targets, then the manifest's files, then each index's shards (an index found
// among the shards is followed too). A file is scanned once, by identity: a shard already
// scanned as a target is not scanned again. A shard that cannot be found is an error of its
// index (code missing_shard), so an incomplete set is never SAFE.
//
// Thread-compatible: one FileSource per call (called from `jobs` threads, see ScanSetOptions).
#ifndef CKPTSCAN_APP_SCAN_SET_H_
#define CKPTSCAN_APP_SCAN_SET_H_

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "app/manifest.h"
#include "app/scan_targets.h"
#include "ckptscan/v1/report.pb.h"

namespace ckptscan::app {

// A file's identity (device, inode), to scan each file once.
struct FileId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  auto operator<=>(const FileId&) const = default;
};

class FileSource {
 public:
  virtual ~FileSource() = default;
  // One file's report, judged alone (an index's shards are ScanSet's job). What cannot be read
  // is an ERROR report, never a pass.
  virtual v1::FileReport Scan(const std::string& path) = 0;
  // Which file `path` names for this source, or why it cannot be opened (NotFound when there is
  // none; see MissingFile).
  virtual absl::StatusOr<FileId> Find(const std::string& path) = 0;
};

// NotFound "PATH: strerror(err)" (PATH made terminal-safe): the one wording for a file that is
// not there, whichever source looked.
absl::Status MissingFile(const std::string& path, int err);

// scan --unknown: what a file in no format ckptscan verifies (kind "unknown", no finding, no
// other error) becomes.
enum class UnknownPolicy {
  kError,  // ERROR (the default): it was not verified
  kWarn,   // SUSPICIOUS, finding file.unknown_format instead of the error
  kSkip,   // left out of the files, listed as skipped
};

struct ScanSetOptions {
  UnknownPolicy unknown = UnknownPolicy::kError;
  // With a manifest: every target file it does not list gets a manifest.unlisted finding.
  bool report_unlisted = false;
  // How many files are scanned at once (scan -j). Above 1 the source's Scan is called from
  // that many threads, so it must be thread-safe; the report is the same, in the same order,
  // as with 1: the files are scanned ahead in parallel, then placed as a sequential scan would.
  int jobs = 1;
};

// Scans the targets (kSkipped ones go to the report's skipped list; a file already scanned
// under another name, by identity, is scanned once and the other name listed as skipped; a
// target's expected_sha256 is compared like a manifest's), then the manifest's files, each
// compared with its digest (a mismatch is an error, code digest_mismatch; a file scanned as a
// target is not scanned again), then every index's shards (a shard a pattern skipped is
// scanned all the same, and its skipped entry says so); applies the unknown policy; appends
// each file to `report` and folds its verdict and summary (FoldVerdict).
void ScanSet(const std::vector<ScanTarget>& targets, const std::vector<ManifestEntry>& manifest,
             FileSource* source, v1::Report* report, const ScanSetOptions& options = {});

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_SCAN_SET_H_
