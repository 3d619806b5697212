#include "pipeline/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include "absl/status/status.h"

namespace ckptscan::pipeline {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

}  // namespace

absl::StatusOr<std::string> Sha256Hex(std::string_view bytes) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr)
    return absl::InternalError("sha256: EVP_MD_CTX_new failed");
  if (EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("sha256: EVP_DigestInit_ex failed");
  }
  for (size_t off = 0; off < bytes.size(); off += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - off);
    if (EVP_DigestUpdate(ctx.get(), bytes.data() + off, n) != 1) {
      return absl::InternalError("sha256: EVP_DigestUpdate failed");
    }
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1 || len != 32) {
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

}  // namespace ckptscan::pipeline
