#include "signing/keys.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "base/unique_fd.h"
#include "signing/encoding.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

// Never prompts: a passphrase-protected key fails to load.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<Curve> CurveOf(EVP_PKEY* pkey) {
  if (EVP_PKEY_is_a(pkey, "EC") != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "key type %s is not supported: OMS signing uses ECDSA keys (P-256, P-384, P-521)",
        EVP_PKEY_get0_type_name(pkey) != nullptr ? EVP_PKEY_get0_type_name(pkey) : "unknown"));
  }
  char group[64] = {0};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group),
                                     &len) != 1) {
    return absl::InvalidArgumentError("EC key without a named curve is not supported: " +
                                      OpenSslError());
  }
  const std::string_view g(group, len);
  if (g == "prime256v1" || g == "P-256") return Curve::kP256;
  if (g == "secp384r1" || g == "P-384") return Curve::kP384;
  if (g == "secp521r1" || g == "P-521") return Curve::kP521;
  return absl::InvalidArgumentError(
      absl::StrFormat("EC curve %s is not supported: use P-256, P-384 or P-521", AbslView(g)));
}

absl::StatusOr<std::string> PublicPem(EVP_PKEY* pkey) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return absl::InternalError("BIO_new failed");
  if (PEM_write_bio_PUBKEY(bio.get(), pkey) != 1) {
    return absl::InternalError("PEM_write_bio_PUBKEY failed: " + OpenSslError());
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool LooksEncrypted(std::string_view pem) {
  return pem.find("ENCRYPTED") != std::string_view::npos;
}

}  // namespace

void internal::PkeyFree::operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }

std::string_view CurveName(Curve curve) {
  switch (curve) {
    case Curve::kP256:
      return "P-256";
    case Curve::kP384:
      return "P-384";
    case Curve::kP521:
      return "P-521";
  }
  return "?";
}

const EVP_MD* DigestForCurve(Curve curve) {
  switch (curve) {
    case Curve::kP256:
      return EVP_sha256();
    case Curve::kP384:
      return EVP_sha384();
    case Curve::kP521:
      return EVP_sha512();
  }
  return EVP_sha256();
}

absl::StatusOr<PublicKey> PublicKey::FromPkey(EVP_PKEY* pkey) {
  absl::StatusOr<Curve> curve = CurveOf(pkey);
  if (!curve.ok()) return curve.status();
  absl::StatusOr<std::string> pem = PublicPem(pkey);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::string> hint = Sha256Hex(*pem);
  if (!hint.ok()) return hint.status();
  if (EVP_PKEY_up_ref(pkey) != 1) return absl::InternalError("EVP_PKEY_up_ref failed");
  return PublicKey(internal::PkeyPtr(pkey), *curve, *std::move(pem), *std::move(hint));
}

absl::StatusOr<PublicKey> PublicKey::FromPem(std::string_view pem) {
  if (pem.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("public key PEM is too large");
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  internal::PkeyPtr pkey(PEM_read_bio_PUBKEY(bio.get(), nullptr, NoPassphrase, nullptr));
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        "not a PEM public key (expected \"-----BEGIN PUBLIC KEY-----\"): " + OpenSslError());
  }
  return FromPkey(pkey.get());
}

absl::StatusOr<PublicKey> PublicKey::LoadFile(const std::string& path, const Limits& limits) {
  absl::StatusOr<std::string> pem = ReadSmallFile(path, limits.max_pem_bytes, "max_pem_bytes");
  if (!pem.ok()) return pem.status();
  absl::StatusOr<PublicKey> key = FromPem(*pem);
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrFormat("public key file %s: %s", path, key.status().message()));
  }
  return key;
}

bool PublicKey::Equals(const PublicKey& other) const {
  return EVP_PKEY_eq(pkey_.get(), other.pkey_.get()) == 1;
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(std::string_view pem) {
  if (pem.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("private key PEM is too large");
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  internal::PkeyPtr pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (pkey == nullptr) {
    const std::string err = OpenSslError();
    if (LooksEncrypted(pem)) {
      return absl::InvalidArgumentError(
          "the private key is passphrase-protected; ckptscan needs an unencrypted key in a "
          "mode-0600 file");
    }
    return absl::InvalidArgumentError(
        "not a PEM private key (expected \"-----BEGIN PRIVATE KEY-----\" or "
        "\"-----BEGIN EC PRIVATE KEY-----\"): " +
        err);
  }
  absl::StatusOr<PublicKey> pub = PublicKey::FromPkey(pkey.get());
  if (!pub.ok()) return pub.status();
  return PrivateKey(std::move(pkey), *std::move(pub));
}

absl::StatusOr<PrivateKey> PrivateKey::LoadFile(const std::string& path, const Limits& limits) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("private key file %s: open", path));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("private key file %s: fstat", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("private key file %s is not a regular file", path));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "private key file %s has mode %04o: group/other may access it; refusing to use it "
        "(run: chmod 600 %s)",
        path, st.st_mode & 07777, path));
  }
  if (static_cast<uint64_t>(st.st_size) > limits.max_pem_bytes) {
    return base::LimitError(
        absl::StrFormat("private key file %s is %d bytes, over Limits::max_pem_bytes (%d)", path,
                        st.st_size, limits.max_pem_bytes),
        "max_pem_bytes", limits.max_pem_bytes);
  }
  std::string pem(static_cast<size_t>(st.st_size), '\0');
  absl::Cleanup wipe = [&pem] { OPENSSL_cleanse(pem.data(), pem.size()); };
  size_t got = 0;
  while (got < pem.size()) {
    const ssize_t n =
        ::pread(fd.get(), pem.data() + got, pem.size() - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrFormat("private key file %s: read", path));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  absl::StatusOr<PrivateKey> key = FromPem(std::string_view(pem.data(), got));
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrFormat("private key file %s: %s", path, key.status().message()));
  }
  return key;
}

absl::StatusOr<PrivateKey> PrivateKey::Generate(Curve curve) {
  const char* group = curve == Curve::kP256 ? "P-256" : curve == Curve::kP384 ? "P-384" : "P-521";
  internal::PkeyPtr pkey(EVP_EC_gen(group));
  if (pkey == nullptr) return absl::InternalError("EVP_EC_gen failed: " + OpenSslError());
  absl::StatusOr<PublicKey> pub = PublicKey::FromPkey(pkey.get());
  if (!pub.ok()) return pub.status();
  return PrivateKey(std::move(pkey), *std::move(pub));
}

absl::StatusOr<std::string> PrivateKey::ToPem() const {
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr) bio.reset(BIO_new(BIO_s_mem()));
  if (bio == nullptr) return absl::InternalError("BIO_new failed");
  if (PEM_write_bio_PrivateKey(bio.get(), pkey_.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
      1) {
    return absl::InternalError("PEM_write_bio_PrivateKey failed: " + OpenSslError());
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status WriteNewFile(const std::string& path, std::string_view contents, unsigned mode) {
  return WriteNewFileAt(AT_FDCWD, path, contents, mode);
}

absl::Status WriteNewFileAt(int dir_fd, const std::string& name, std::string_view contents,
                            unsigned mode, std::string_view shown_view) {
  const std::string path(shown_view.empty() ? std::string_view(name) : shown_view);
  base::UniqueFd fd(::openat(dir_fd, name.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                             static_cast<mode_t>(mode)));
  if (!fd.valid()) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s already exists; refusing to overwrite it", path));
    }
    return absl::ErrnoToStatus(errno, absl::StrFormat("create %s", path));
  }
  // Only what this call created is removed: the name, if it still names this file.
  struct stat ours;
  const bool known = ::fstat(fd.get(), &ours) == 0;
  auto remove = [&] {
    struct stat named;
    if (known && ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        ours.st_dev == named.st_dev && ours.st_ino == named.st_ino) {
      (void)::unlinkat(dir_fd, name.c_str(), 0);
    }
  };
  auto fail = [&](int err, std::string_view what) {
    remove();
    return absl::ErrnoToStatus(err, absl::StrFormat("%s %s", AbslView(what), path));
  };
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) return fail(errno, "fchmod");
  if (absl::Status s = base::WriteAll(fd.get(), contents, absl::StrCat("write ", path)); !s.ok()) {
    remove();
    return s;
  }
  if (::fsync(fd.get()) != 0) return fail(errno, "fsync");
  if (::close(fd.release()) != 0) {
    const int err = errno;
    remove();
    return absl::ErrnoToStatus(err, absl::StrFormat("close %s", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<PublicKey> GenerateKeyFiles(const std::string& private_path,
                                           const std::string& public_path) {
  absl::StatusOr<PrivateKey> key = PrivateKey::Generate(Curve::kP256);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> pem = key->ToPem();
  if (!pem.ok()) return pem.status();
  absl::Cleanup wipe = [&pem] { OPENSSL_cleanse(pem->data(), pem->size()); };
  if (absl::Status s = WriteNewFile(private_path, *pem, 0600); !s.ok()) return s;
  if (!public_path.empty()) {
    if (absl::Status s = WriteNewFile(public_path, key->public_key().pem(), 0644); !s.ok()) {
      (void)::unlink(private_path.c_str());
      return s;
    }
  }
  return PublicKey::FromPkey(key->public_key().get());
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                          std::string_view limit_name) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, absl::StrFormat("open %s", path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("fstat %s", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return base::LimitError(absl::StrFormat("%s is %d bytes, over Limits::%s (%d)", path,
                                            st.st_size, AbslView(limit_name), max_bytes),
                            limit_name, max_bytes);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrFormat("read %s", path));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace ckptscan::signing
