#include "app/publish.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "signing/bundle.h"

namespace ckptscan::app {
namespace {

absl::StatusOr<std::string> SignWith(const signing::Manifest& manifest,
                                     const SignOptions& options) {
  if (options.cert_pem.empty()) return signing::Sign(manifest, *options.key);
  return signing::SignWithCertificate(manifest, *options.key, options.cert_pem, options.chain_pem);
}

}  // namespace

std::vector<uint64_t> ShardStarts(uint64_t size, uint64_t shard_size, uint64_t from) {
  std::vector<uint64_t> starts;
  if (shard_size == 0) return starts;
  for (uint64_t start = 0; start < size; start += shard_size) {
    if (start >= from) starts.push_back(start);
    if (shard_size >= size - start) break;
  }
  return starts;
}

ShardWork::ShardWork(int fd, uint64_t size, uint64_t shard_size, std::vector<uint64_t> starts)
    : fd_(fd), size_(size), shard_size_(shard_size), starts_(std::move(starts)) {}

void ShardWork::Work() {
  for (size_t i = next_.fetch_add(1); i < starts_.size(); i = next_.fetch_add(1)) {
    const uint64_t start = starts_[i];
    const uint64_t len = std::min(shard_size_, size_ - start);
    absl::StatusOr<std::string> hex = base::Sha256HexOfRange(fd_, start, len);
    absl::MutexLock lock(&mu_);
    if (!hex.ok()) {
      if (status_.ok()) status_ = hex.status();
      continue;
    }
    digests_[start] = *std::move(hex);
  }
}

absl::StatusOr<ShardDigests> ShardWork::Result() {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  return std::move(digests_);
}

absl::StatusOr<std::string> SignFileModel(int fd, uint64_t size, const std::string& model_name,
                                          const SignOptions& options, const ShardDigests* early,
                                          uint64_t header_end) {
  signing::Manifest manifest;
  manifest.model_name = model_name;
  if (options.method == signing::Method::kFiles) {
    absl::StatusOr<std::string> digest = base::Sha256HexOfFd(fd, size);
    if (!digest.ok()) return digest.status();
    manifest.AddFile(".", *std::move(digest));
    return SignWith(manifest, options);
  }
  manifest.serialization.method = signing::Method::kShards;
  manifest.serialization.shard_size = options.shard_size;
  // Shards computed early are valid only past the header (which was written after them);
  // every other shard is hashed now, on both cores.
  ShardDigests digests;
  std::vector<uint64_t> missing;
  for (uint64_t start : ShardStarts(size, options.shard_size, 0)) {
    auto it = early != nullptr ? early->find(start) : ShardDigests::const_iterator();
    if (early != nullptr && it != early->end() && start >= header_end) {
      digests[start] = it->second;
    } else {
      missing.push_back(start);
    }
  }
  ShardWork work(fd, size, options.shard_size, std::move(missing));
  std::thread helper([&] { work.Work(); });
  work.Work();
  helper.join();
  absl::StatusOr<ShardDigests> rest = work.Result();
  if (!rest.ok()) return rest.status();
  digests.insert(rest->begin(), rest->end());
  for (const auto& [start, hex] : digests) {
    manifest.AddShard(".", start, std::min(start + options.shard_size, size), hex);
  }
  return SignWith(manifest, options);
}

absl::StatusOr<std::string> SignDirectoryModel(int dir_fd, const std::string& model_name,
                                               const std::string& signature_name,
                                               const SignOptions& options) {
  signing::HashOptions hash;
  hash.serialization.method = options.method;
  hash.serialization.shard_size = options.shard_size;
  hash.serialization.ignore_paths = {signature_name};
  absl::StatusOr<signing::Manifest> manifest = signing::HashModelAt(dir_fd, model_name, hash);
  if (!manifest.ok()) return manifest.status();
  return SignWith(*manifest, options);
}

std::string SignaturePathFor(const std::string& output) { return absl::StrCat(output, ".sig"); }

}  // namespace ckptscan::app
