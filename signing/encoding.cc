#include "signing/encoding.h"

#include <openssl/err.h>
#include <openssl/evp.h>

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/strings.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

constexpr char kHexDigits[] = "0123456789abcdef";

bool IsBase64Char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// EVP_EncodeBlock / EVP_DecodeBlock take int lengths; we feed them in slices of this many
// input bytes (a multiple of 3 for encoding, of 4 for decoding).
constexpr size_t kEncodeSlice = 3u << 20;
constexpr size_t kDecodeSlice = 4u << 20;

}  // namespace

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error recorded";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4 + 1);
  for (size_t off = 0; off < bytes.size(); off += kEncodeSlice) {
    const size_t n = std::min(kEncodeSlice, bytes.size() - off);
    const size_t at = out.size();
    out.resize(at + (n + 2) / 3 * 4 + 1);  // EVP_EncodeBlock writes a NUL terminator
    const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                        reinterpret_cast<const unsigned char*>(bytes.data() + off),
                                        static_cast<int>(n));
    out.resize(at + static_cast<size_t>(written));
  }
  return out;
}

absl::StatusOr<std::string> Base64Decode(std::string_view text, std::string_view what) {
  auto bad = [&](size_t offset, std::string_view why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not standard base64: %s (at character %d)", AbslView(what), AbslView(why), offset));
  };
  if (text.size() % 4 != 0) {
    return bad(text.size(), absl::StrFormat("length %d is not a multiple of 4", text.size()));
  }
  size_t pad = 0;
  if (!text.empty() && text.back() == '=')
    pad = (text.size() >= 2 && text[text.size() - 2] == '=') ? 2 : 1;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    if (!IsBase64Char(text[i])) {
      return bad(i, text[i] == '=' ? "'=' before the end" : "character outside the alphabet");
    }
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t off = 0; off < text.size(); off += kDecodeSlice) {
    const size_t n = std::min(kDecodeSlice, text.size() - off);
    const size_t at = out.size();
    out.resize(at + n / 4 * 3);
    const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                        reinterpret_cast<const unsigned char*>(text.data() + off),
                                        static_cast<int>(n));
    if (written < 0 || static_cast<size_t>(written) != n / 4 * 3) {
      return bad(off, "rejected by EVP_DecodeBlock");
    }
  }
  out.resize(out.size() - pad);  // EVP_DecodeBlock counts padding as zero bytes
  return out;
}

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHexDigits[c >> 4]);
    out.push_back(kHexDigits[c & 15]);
  }
  return out;
}

std::string HexEncode(const Sha256Digest& digest) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

bool HexDecode(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  out->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexValue(hex[i]);
    const int lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

bool IsSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (HexValue(c) < 0) return false;
  }
  return true;
}

void Sha256Hasher::Free::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256Hasher::Sha256Hasher(Sha256Hasher&&) noexcept = default;
Sha256Hasher& Sha256Hasher::operator=(Sha256Hasher&&) noexcept = default;
Sha256Hasher::~Sha256Hasher() = default;

absl::StatusOr<Sha256Hasher> Sha256Hasher::Create() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return absl::InternalError("sha256: EVP_MD_CTX_new failed");
  Sha256Hasher hasher(ctx);
  if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("sha256: EVP_DigestInit_ex failed");
  }
  return hasher;
}

absl::Status Sha256Hasher::Update(std::string_view bytes) {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("sha256: hasher was moved from");
  if (!bytes.empty() && EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1) {
    return absl::InternalError("sha256: EVP_DigestUpdate failed");
  }
  return absl::OkStatus();
}

absl::StatusOr<Sha256Digest> Sha256Hasher::Finish() {
  if (ctx_ == nullptr) return absl::FailedPreconditionError("sha256: hasher was moved from");
  Sha256Digest digest{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &n) != 1 || n != digest.size()) {
    return absl::InternalError("sha256: EVP_DigestFinal_ex failed");
  }
  return digest;
}

absl::StatusOr<Sha256Digest> Sha256(std::string_view bytes) {
  absl::StatusOr<Sha256Hasher> h = Sha256Hasher::Create();
  if (!h.ok()) return h.status();
  if (absl::Status s = h->Update(bytes); !s.ok()) return s;
  return h->Finish();
}

absl::StatusOr<std::string> Sha256Hex(std::string_view bytes) {
  absl::StatusOr<Sha256Digest> d = Sha256(bytes);
  if (!d.ok()) return d.status();
  return HexEncode(*d);
}

}  // namespace ckptscan::signing
