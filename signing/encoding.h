// Byte encodings and SHA-256 for signing/, all through OpenSSL 3 EVP: standard base64
// (RFC 4648 §4, padded, no line breaks) via EVP_EncodeBlock / EVP_DecodeBlock, lowercase hex,
// and SHA-256 one-shot or streaming (Sha256Hasher).
//
// Thread-safe: no shared state. Sha256Hasher is thread-compatible (one per thread).
#ifndef CKPTSCAN_SIGNING_ENCODING_H_
#define CKPTSCAN_SIGNING_ENCODING_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace ckptscan::signing {

using Sha256Digest = std::array<uint8_t, 32>;

// The oldest queued OpenSSL error as text (and the queue cleared), for messages.
std::string OpenSslError();

std::string Base64Encode(std::string_view bytes);
// Strict: only A-Z a-z 0-9 + /, length a multiple of 4, '=' only as 1-2 trailing pad
// characters, no whitespace. InvalidArgument names `what` and the first bad offset.
absl::StatusOr<std::string> Base64Decode(std::string_view text, std::string_view what);

std::string HexEncode(std::string_view bytes);
std::string HexEncode(const Sha256Digest& digest);
// Lowercase hex only (what OMS writes); false on anything else or an odd length.
[[nodiscard]] bool HexDecode(std::string_view hex, std::string* out);
// True for exactly 64 lowercase hex digits.
bool IsSha256Hex(std::string_view s);

// Streaming SHA-256. Create() fails only if OpenSSL cannot allocate.
class Sha256Hasher final {
 public:
  static absl::StatusOr<Sha256Hasher> Create();
  Sha256Hasher(Sha256Hasher&&) noexcept;
  Sha256Hasher& operator=(Sha256Hasher&&) noexcept;
  ~Sha256Hasher();

  [[nodiscard]] absl::Status Update(std::string_view bytes);
  // Ends this hash; the hasher may not be updated again.
  absl::StatusOr<Sha256Digest> Finish();

 private:
  explicit Sha256Hasher(EVP_MD_CTX* ctx) : ctx_(ctx) {}
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const;
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

absl::StatusOr<Sha256Digest> Sha256(std::string_view bytes);
absl::StatusOr<std::string> Sha256Hex(std::string_view bytes);

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_ENCODING_H_
