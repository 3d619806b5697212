#include "base/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ckptscan::base {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

using Ctx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

absl::StatusOr<Ctx> NewSha256() {
  Ctx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return absl::InternalError("sha256: EVP_MD_CTX_new failed");
  if (EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("sha256: EVP_DigestInit_ex failed");
  }
  return ctx;
}

absl::StatusOr<std::string> FinishHex(EVP_MD_CTX* ctx);

absl::StatusOr<std::string> HashRange(int fd, uint64_t offset, uint64_t length,
                                      const std::function<bool()>& stop,
                                      std::atomic<uint64_t>* progress = nullptr);

}  // namespace

absl::StatusOr<std::string> Sha256Hex(std::string_view bytes) {
  absl::StatusOr<Ctx> ctx = NewSha256();
  if (!ctx.ok()) return ctx.status();
  for (size_t off = 0; off < bytes.size(); off += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - off);
    if (EVP_DigestUpdate(ctx->get(), bytes.data() + off, n) != 1) {
      return absl::InternalError("sha256: EVP_DigestUpdate failed");
    }
  }
  return FinishHex(ctx->get());
}

absl::StatusOr<std::string> Sha256HexOfFd(int fd, uint64_t size) {
  return Sha256HexOfRange(fd, 0, size);
}

absl::StatusOr<std::string> Sha256HexOfRange(int fd, uint64_t offset, uint64_t length) {
  return HashRange(fd, offset, length, nullptr);
}

namespace {

absl::StatusOr<std::string> HashRange(int fd, uint64_t offset, uint64_t length,
                                      const std::function<bool()>& stop,
                                      std::atomic<uint64_t>* progress) {
  if (length > UINT64_MAX - offset) return absl::InvalidArgumentError("sha256: range overflows");
  const uint64_t size = offset + length;
  absl::StatusOr<Ctx> ctx = NewSha256();
  if (!ctx.ok()) return ctx.status();
  std::vector<char> buf(kChunk);
  uint64_t off = offset;
  while (off < size) {
    if (stop && stop()) return absl::CancelledError("sha256: stopped");
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, "sha256: read");
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("sha256: the file shrank to ", off,
                                              " bytes while being read (expected ", size, ")"));
    }
    if (EVP_DigestUpdate(ctx->get(), buf.data(), static_cast<size_t>(n)) != 1) {
      return absl::InternalError("sha256: EVP_DigestUpdate failed");
    }
    off += static_cast<uint64_t>(n);
    if (progress != nullptr)
      progress->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
  return FinishHex(ctx->get());
}

absl::StatusOr<std::string> FinishHex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1 || len != 32) {
    return absl::InternalError("sha256: EVP_DigestFinal_ex failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace
absl::StatusOr<std::unique_ptr<BackgroundSha256>> BackgroundSha256::Start(
    int fd, uint64_t size, std::function<bool()> stop, std::atomic<uint64_t>* progress) {
  base::UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!dup.valid()) return absl::ErrnoToStatus(errno, "dup");
  std::unique_ptr<BackgroundSha256> hash(new BackgroundSha256(std::move(dup)));
  BackgroundSha256* h = hash.get();
  h->thread_ = std::thread([h, size, stop = std::move(stop), progress] {
    h->result_ = HashRange(h->fd_.get(), 0, size, stop, progress);
  });
  return hash;
}

BackgroundSha256::~BackgroundSha256() {
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::string> BackgroundSha256::Wait() {
  if (thread_.joinable()) thread_.join();
  return std::move(result_);
}

}  // namespace ckptscan::base
