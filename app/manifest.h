// `ckptscan scan --manifest FILE`: the files a model is expected to consist of, with their
// SHA-256 digests.
//
// Two forms, told apart by the first byte that is not whitespace:
//   sha256sum's output    one line per file, "HEX  PATH" (text mode) or "HEX *PATH" (binary
//                         mode); a line starting with '\' has "\\" and "\n" escapes in PATH, as
//                         sha256sum writes names holding a backslash or a newline. Blank lines
//                         are ignored.
//   a JSON array          [{"path": "model.bin", "sha256": "HEX"}, ...]; other keys are
//                         ignored; duplicate keys, a missing or non-string field are errors.
// HEX is 64 hex digits (either case; kept lowercase). A relative PATH is relative to the
// manifest's own directory and is returned joined to it ("models/SHA256SUMS" listing "a.bin"
// gives "models/a.bin"); an absolute PATH is kept. Entries keep the manifest's order.
//
// Errors are InvalidArgument naming the manifest and the line (or entry index);
// ResourceExhausted past ManifestLimits. Thread-safe: pure functions.
#ifndef CKPTSCAN_APP_MANIFEST_H_
#define CKPTSCAN_APP_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckptscan::app {

struct ManifestLimits {
  uint64_t max_bytes = 16ull << 20;  // the manifest file itself
  uint64_t max_entries = 1u << 20;
};

struct ManifestEntry {
  std::string path;    // joined to the manifest's directory when relative
  std::string sha256;  // 64 lowercase hex digits
};

// Parses manifest text; `manifest_path` names it in errors and gives the directory paths
// are relative to.
absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(std::string_view text,
                                                         std::string_view manifest_path,
                                                         const ManifestLimits& limits = {});

// The folder a manifest's relative paths are relative to: its own ("." for a bare name).
std::string ManifestFolder(std::string_view manifest_path);

// Reads `path` (at most limits.max_bytes) and parses it.
absl::StatusOr<std::vector<ManifestEntry>> ReadManifest(const std::string& path,
                                                        const ManifestLimits& limits = {});

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_MANIFEST_H_
