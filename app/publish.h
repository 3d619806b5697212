// Signing conversion outputs on the trusted side (docs/signing.md): the key lives in the
// process that publishes, never in a worker, and what is signed is read back from the output
// by this process (a worker's word about its own bytes is never signed).
//
// A single output file is a single-file model (its only resource is ".", as model_signing
// names it; with the shards method ".:START:END") signed before it is published, its bundle
// written beside it as OUT.sig; a sharded set is a directory model signed inside the staging
// directory, both cores hashing, its bundle written as model.sig in it (and ignored by the
// signature), before the set is renamed into place. Either way a signed output is never
// visible without its signature.
//
// The shards method lets hashing start before the output is final: a jailed worker can only
// append to its output (seccomp allows write(2), no seek, no truncate), so every shard past the
// header is final once written, and ShardWork hashes those while the input's digest (which the
// header needs) is still being computed. Only the shards the header overlaps are hashed after
// the header is written.
//
// Thread-compatible, except ShardWork::Work, which any number of threads may run at once.
#ifndef CKPTSCAN_APP_PUBLISH_H_
#define CKPTSCAN_APP_PUBLISH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "signing/keys.h"
#include "signing/manifest.h"

namespace ckptscan::app {

// The shard size ckptscan signs with (--sign-method shards): small enough that the shard
// holding the header costs little after it, large enough to keep bundles short (a 100 GB model
// is 800 resources).
inline constexpr uint64_t kSignShardSize = 128ull << 20;

struct SignOptions {
  const signing::PrivateKey* key = nullptr;  // null: not signed
  signing::Method method = signing::Method::kFiles;
  uint64_t shard_size = kSignShardSize;
  // The certificate method (--cert): a PEM leaf certifying `key`, and PEM intermediates (may
  // be empty). Empty leaf: the key method.
  std::string cert_pem;
  std::string chain_pem;
  // Told how long each signature took (the daemon's metrics); may be empty.
  std::function<void(absl::Duration)> on_signed;
};

// Shard digests of one file, by shard start.
using ShardDigests = std::map<uint64_t, std::string>;

// The starts of the shards [k*S, min((k+1)*S, size)) that begin at or after `from`.
std::vector<uint64_t> ShardStarts(uint64_t size, uint64_t shard_size, uint64_t from);

// Hashes the given shards of the file on `fd` (`size` bytes) by pread, each shard taken by
// whichever thread runs Work() next.
class ShardWork final {
 public:
  ShardWork(int fd, uint64_t size, uint64_t shard_size, std::vector<uint64_t> starts);
  void Work();  // returns when no shard is left
  uint64_t size() const { return size_; }
  // After every Work() call has returned.
  absl::StatusOr<ShardDigests> Result();

 private:
  const int fd_;
  const uint64_t size_;
  const uint64_t shard_size_;
  std::vector<uint64_t> starts_;
  std::atomic<size_t> next_{0};
  absl::Mutex mu_;
  ShardDigests digests_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// The bundle for the single-file model on `fd` (`size` bytes), named `model_name` in the
// statement. With the shards method, `early` (may be null) holds digests computed before the
// header was written: those of shards starting at or after `header_end` are used, the others
// are hashed now (both cores).
absl::StatusOr<std::string> SignFileModel(int fd, uint64_t size, const std::string& model_name,
                                          const SignOptions& options,
                                          const ShardDigests* early = nullptr,
                                          uint64_t header_end = 0);

// The bundle for the directory model open on `dir_fd` (every regular file but `signature_name`,
// which is recorded as ignored), named `model_name` in the statement; both cores hash. Files
// are listed and read beneath the descriptor only (signing::HashModelAt, O_NOFOLLOW).
absl::StatusOr<std::string> SignDirectoryModel(int dir_fd, const std::string& model_name,
                                               const std::string& signature_name,
                                               const SignOptions& options);

// OUT -> OUT.sig: where a single output file's signature goes.
std::string SignaturePathFor(const std::string& output);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_PUBLISH_H_
