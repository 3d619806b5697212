// The OMS manifest: what a signature covers. A list of resources (a relative file path, or a
// "path:start:end" byte range of a file for the shards method) each with a SHA-256 digest, the
// serialization parameters needed to recompute it, and the model name.
//
// HashModel enumerates and hashes a model directory (or single file) the way model_signing
// does; callers that already hashed their files (the converter hashes while writing) build a
// Manifest with AddFile / AddShard instead. CompareManifests is the verifier's last step.
//
// Thread-safety: Manifest is a plain value. HashModel uses its own worker threads and shares
// nothing with the caller.
//
//   signing::HashOptions opts;
//   opts.serialization.ignore_paths = {"model.sig"};
//   CKPT_ASSIGN_OR_RETURN(signing::Manifest m, signing::HashModel("/models/llama", opts));
#ifndef CKPTSCAN_SIGNING_MANIFEST_H_
#define CKPTSCAN_SIGNING_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "signing/encoding.h"
#include "signing/limits.h"

namespace ckptscan::signing {

enum class Method { kFiles, kShards };
std::string_view MethodName(Method m);  // "files" / "shards"

inline constexpr uint64_t kDefaultShardSize = 1'000'000'000;  // upstream and spec default
inline constexpr std::string_view kDefaultSignatureName = "model.sig";
// Excluded from enumeration by default, at the model root only (spec §6.2, model_signing).
inline constexpr std::string_view kGitPaths[] = {".git", ".gitattributes", ".github", ".gitignore"};

struct Serialization {
  Method method = Method::kFiles;
  // kShards only: bytes per range (the last range of a file may be shorter).
  uint64_t shard_size = kDefaultShardSize;
  // Recorded as signed. ckptscan never follows symbolic links: meeting one while hashing is an
  // error whatever this says.
  bool allow_symlinks = false;
  // Paths excluded from the signature, relative to the model root; an entry also excludes
  // everything below it. Recorded in the statement's serialization.ignore_paths.
  std::vector<std::string> ignore_paths;
  // hash_type is always "sha256" (the only one ckptscan writes or verifies).
};

struct Resource {
  // kFiles: canonical relative path ("dir/file"; "." for a single-file model, as
  // model_signing writes). kShards: "<path>:<start>:<end>", end exclusive.
  std::string name;
  std::string digest;  // 64 lowercase hex digits (SHA-256)
};

struct Manifest {
  std::string model_name;  // subject[0].name: informational (basename of the model path)
  Serialization serialization;
  std::vector<Resource> resources;

  // For digests computed elsewhere. Names are checked by ValidateManifest (and by Sign).
  void AddFile(std::string path, std::string sha256_hex);
  void AddShard(std::string_view path, uint64_t start, uint64_t end, std::string sha256_hex);
};

// A canonical relative path: '/'-separated, no empty, "." or ".." component, no leading or
// trailing '/', valid UTF-8, no NUL; or exactly "." (the single-file model). `what` names the
// field in the error.
absl::Status CheckRelativePath(std::string_view path, std::string_view what, const Limits& limits);

struct ShardName {
  std::string_view path;
  uint64_t start = 0;
  uint64_t end = 0;
};
// Splits "<path>:<start>:<end>" at the last two colons; decimal without sign or leading zeros.
absl::StatusOr<ShardName> ParseShardName(std::string_view name);

// Every name canonical and unique, every digest 64 lowercase hex, shard ranges well formed
// (start < end, end - start <= shard_size, start a multiple of shard_size), ignore paths
// canonical, counts within limits.
absl::Status ValidateManifest(const Manifest& manifest, const Limits& limits);

// model_signing's order: by path components, then (shards) by start, end as numbers.
void SortResources(Method method, std::vector<Resource>* resources);

// subject digest: SHA-256 over the raw digests of `resources` in the given order.
absl::StatusOr<Sha256Digest> RootDigest(const std::vector<Resource>& resources);

struct HashOptions {
  // Method, shard size and the caller's ignore paths (the signature file's name belongs here
  // when it lives inside the model directory).
  Serialization serialization;
  // Also exclude kGitPaths and record them in ignore_paths, as model_signing does.
  bool ignore_git_paths = true;
  // When set, only these files are hashed (others are enumerated but skipped): how a
  // verifier with "ignore unsigned files" avoids reading what it will not compare. Not applied
  // to a single-file model.
  std::optional<std::set<std::string>> only_files;
  // Worker threads (both cores by default); each reads with pread into its own buffer.
  int threads = 2;
  size_t read_buffer_bytes = 1u << 20;
  Limits limits;
};

// Enumerates regular files under `model_path` (a directory, or one regular file whose
// resource is named "."), sorted, skipping ignored paths, and hashes them. Symbolic links,
// sockets, devices and FIFOs are errors (model_signing refuses them too), as are names that
// are not valid UTF-8. The returned manifest records ignore_paths sorted and deduplicated.
absl::StatusOr<Manifest> HashModel(const std::string& model_path, const HashOptions& options);

// HashModel for the directory open on `dir_fd` (any descriptor of a directory, O_PATH too;
// its offset is not moved), named `model_name` in the manifest and in messages. Every name is
// opened beneath the descriptor (openat, O_NOFOLLOW): the path the directory was reached by is
// never resolved again, so renaming it or replacing it with a symbolic link meanwhile changes
// nothing that is hashed.
absl::StatusOr<Manifest> HashModelAt(int dir_fd, std::string model_name,
                                     const HashOptions& options);

// Compares what was signed with what is there. OK when every signed resource is present with
// its digest and (unless `ignore_unsigned_files`) nothing else is. Otherwise DataLoss whose
// message lists up to 10 problems, e.g.
//   file "a.bin": digest mismatch (signed 3f…, found 9c…)
//   file "b.bin" is signed but missing
//   unsigned file "c.bin" was added
absl::Status CompareManifests(const Manifest& signed_manifest, const Manifest& actual,
                              bool ignore_unsigned_files);

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_MANIFEST_H_
