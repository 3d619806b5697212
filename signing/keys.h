// ECDSA keys for OMS signing (the `key` and `certificate` methods): P-256 (the default),
// P-384 and P-521 only, as model_signing and the OMS algorithm registry require. The curve
// fixes the digest: SHA-256, SHA-384, SHA-512 respectively.
//
// PrivateKey / PublicKey own an OpenSSL EVP_PKEY; they are move-only and immutable after
// construction, so const methods may be called from several threads at once.
//
//   CKPT_ASSIGN_OR_RETURN(signing::PublicKey pub,
//                         signing::GenerateKeyFiles("/etc/ckptscan/sign.pem",
//                                                   "/etc/ckptscan/sign.pub.pem"));
//   CKPT_ASSIGN_OR_RETURN(signing::PrivateKey key,
//                         signing::PrivateKey::LoadFile("/etc/ckptscan/sign.pem"));
#ifndef CKPTSCAN_SIGNING_KEYS_H_
#define CKPTSCAN_SIGNING_KEYS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "signing/limits.h"

typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_md_st EVP_MD;

namespace ckptscan::signing {

enum class Curve { kP256, kP384, kP521 };
std::string_view CurveName(Curve curve);  // "P-256", ...

namespace internal {
struct PkeyFree {
  void operator()(EVP_PKEY* k) const;
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
}  // namespace internal

class PublicKey final {
 public:
  // A PEM SubjectPublicKeyInfo ("BEGIN PUBLIC KEY"); text before the PEM block is skipped,
  // as OpenSSL does. Non-EC keys and other curves are InvalidArgument.
  static absl::StatusOr<PublicKey> FromPem(std::string_view pem);
  static absl::StatusOr<PublicKey> LoadFile(const std::string& path, const Limits& limits = {});
  // Takes a reference on `pkey` (e.g. from a certificate) after the same curve check.
  static absl::StatusOr<PublicKey> FromPkey(EVP_PKEY* pkey);

  Curve curve() const { return curve_; }
  // The canonical PEM SubjectPublicKeyInfo, as OpenSSL's PEM_write_bio_PUBKEY and Python's
  // cryptography write it (64-column base64, trailing newline).
  const std::string& pem() const { return pem_; }
  // The OMS `publicKey.hint`: lowercase hex SHA-256 of pem() (model_signing ≥ 1.1.0).
  const std::string& hint() const { return hint_; }
  EVP_PKEY* get() const { return pkey_.get(); }
  bool Equals(const PublicKey& other) const;

 private:
  PublicKey(internal::PkeyPtr pkey, Curve curve, std::string pem, std::string hint)
      : pkey_(std::move(pkey)), curve_(curve), pem_(std::move(pem)), hint_(std::move(hint)) {}
  internal::PkeyPtr pkey_;
  Curve curve_;
  std::string pem_;
  std::string hint_;
};

class PrivateKey final {
 public:
  // Unencrypted PEM: PKCS#8 ("BEGIN PRIVATE KEY") or SEC1 ("BEGIN EC PRIVATE KEY"). Encrypted
  // keys are refused (no passphrase prompt is ever shown).
  static absl::StatusOr<PrivateKey> FromPem(std::string_view pem);
  // Reads a key file. Refuses (PermissionDenied, naming the file and its mode) a file that
  // group or others may read, write or execute, and anything that is not a regular file.
  static absl::StatusOr<PrivateKey> LoadFile(const std::string& path, const Limits& limits = {});
  // A fresh key on `curve` (P-256 unless told otherwise).
  static absl::StatusOr<PrivateKey> Generate(Curve curve = Curve::kP256);

  Curve curve() const { return public_key_.curve(); }
  const PublicKey& public_key() const { return public_key_; }
  // Unencrypted PKCS#8 PEM. The caller owns the secret in the returned string.
  absl::StatusOr<std::string> ToPem() const;
  EVP_PKEY* get() const { return pkey_.get(); }

 private:
  PrivateKey(internal::PkeyPtr pkey, PublicKey pub)
      : pkey_(std::move(pkey)), public_key_(std::move(pub)) {}
  internal::PkeyPtr pkey_;
  PublicKey public_key_;
};

// The digest the curve calls for (SHA-256 / SHA-384 / SHA-512).
const EVP_MD* DigestForCurve(Curve curve);

// Generates a P-256 key and writes it: the private PEM to `private_path`, created with
// O_CREAT|O_EXCL and mode 0600 (an existing file is never overwritten: AlreadyExists), and,
// unless `public_path` is empty, the public PEM to `public_path` (also O_EXCL, mode 0644).
// On failure nothing is left behind. Returns the public key.
absl::StatusOr<PublicKey> GenerateKeyFiles(const std::string& private_path,
                                           const std::string& public_path);

// Writes `contents` to a new file (O_CREAT|O_EXCL|O_NOFOLLOW, then fchmod `mode`, fsync);
// removes it again if anything fails.
[[nodiscard]] absl::Status WriteNewFile(const std::string& path, std::string_view contents,
                                        unsigned mode);

// WriteNewFile for `name` in the directory open on `dir_fd` (openat; AT_FDCWD: `name` is a
// path). `shown` names the file in messages (empty: `name`).
[[nodiscard]] absl::Status WriteNewFileAt(int dir_fd, const std::string& name,
                                          std::string_view contents, unsigned mode,
                                          std::string_view shown = {});

// Reads a whole regular file of at most `max_bytes`.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                          std::string_view limit_name);

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_KEYS_H_
