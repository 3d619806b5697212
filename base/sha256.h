// SHA-256 of a byte range, as lowercase hex (OpenSSL EVP).
//
// Thread-safe: no shared state. Large inputs are fed to the digest in bounded
// chunks.
//
//   CKPT_ASSIGN_OR_RETURN(std::string hex, Sha256Hex(file.bytes()));
#ifndef CKPTSCAN_BASE_SHA256_H_
#define CKPTSCAN_BASE_SHA256_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace ckptscan::base {

// 64 lowercase hex digits. Fails (Internal) only if OpenSSL does.
absl::StatusOr<std::string> Sha256Hex(std::string_view bytes);

// The hex SHA-256 of the first `size` bytes of `fd`, read with pread in 1 MiB chunks (memory
// stays bounded whatever the file size; the file offset is not moved). DataLoss if the file is
// shorter than `size`.
absl::StatusOr<std::string> Sha256HexOfFd(int fd, uint64_t size);

// The same for the `length` bytes of `fd` from `offset`.
absl::StatusOr<std::string> Sha256HexOfRange(int fd, uint64_t offset, uint64_t length);

// Sha256HexOfFd on another thread, over a duplicate of the descriptor, so that the caller may
// hand the original away (to a worker) while the file is hashed on another core. `stop` (may be
// empty) is polled between chunks: once it is true the hash ends early, Cancelled (the caller
// no longer needs it: the job failed already).
//
//   CKPT_ASSIGN_OR_RETURN(auto hash, BackgroundSha256::Start(fd.get(), size));
//   ... Run(std::move(fd), ...) ...
//   CKPT_ASSIGN_OR_RETURN(std::string hex, hash->Wait());
class BackgroundSha256 final {
 public:
  // `progress` (may be null) gets the bytes hashed added as they are read.
  static absl::StatusOr<std::unique_ptr<BackgroundSha256>> Start(
      int fd, uint64_t size, std::function<bool()> stop = nullptr,
      std::atomic<uint64_t>* progress = nullptr);
  ~BackgroundSha256();  // waits for the thread
  BackgroundSha256(const BackgroundSha256&) = delete;
  BackgroundSha256& operator=(const BackgroundSha256&) = delete;

  absl::StatusOr<std::string> Wait();  // once

 private:
  explicit BackgroundSha256(base::UniqueFd fd) : fd_(std::move(fd)) {}
  base::UniqueFd fd_;
  absl::StatusOr<std::string> result_;
  std::thread thread_;
};

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_SHA256_H_
