// OpenSSF model signing (OMS) bundles: create and verify them as sigstore/model-transparency's
// `model_signing` does. A bundle is Sigstore bundle v0.3 JSON holding a DSSE envelope whose
// payload is the in-toto statement of statement.h; the signature is DER ECDSA over the DSSE
// pre-authentication encoding (PAE) of that payload.
//
// Methods: `key` (verificationMaterial.publicKey.hint = hex SHA-256 of the PEM public key) and
// `certificate` (verificationMaterial.x509CertificateChain, leaf first, checked against the
// caller's CA certificates with X509_verify_cert). The `sigstore` (keyless) method needs
// Fulcio/Rekor and is refused as Unimplemented.
//
// Errors (docs/signing.md tables them):
//   InvalidArgument    malformed bundle or statement (names the field: "bundle: missing field
//                      dsseEnvelope"), unsupported media/payload/predicate type
//   ResourceExhausted  past a Limits field
//   Unimplemented      sigstore method, hash types other than sha256, the 0.2 predicate
//   Unauthenticated    bad signature, wrong key, untrusted certificate chain
//   DataLoss           the model does not match what was signed (names each file)
//
// Thread-safety: free functions share nothing; a Trust is immutable and may be used by several
// threads at once.
//
//   CKPT_ASSIGN_OR_RETURN(signing::Manifest m, signing::HashModel(dir, hash_options));
//   CKPT_ASSIGN_OR_RETURN(std::string bundle, signing::Sign(m, private_key));
//   ...
//   signing::Trust trust = signing::Trust::Key(std::move(public_key));
//   signing::VerifyOptions options;
//   options.ignore_paths = {"model.sig"};  // the bundle lives inside the model directory
//   CKPT_ASSIGN_OR_RETURN(signing::VerifiedBundle v,
//                         signing::VerifyModel(bundle, trust, dir, options));
#ifndef CKPTSCAN_SIGNING_BUNDLE_H_
#define CKPTSCAN_SIGNING_BUNDLE_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "signing/keys.h"
#include "signing/limits.h"
#include "signing/manifest.h"

typedef struct x509_st X509;

namespace ckptscan::signing {

inline constexpr std::string_view kBundleMediaType =
    "application/vnd.dev.sigstore.bundle.v0.3+json";
// The other spelling of v0.3 that Sigstore defines (sigstore-go writes it); accepted on read.
inline constexpr std::string_view kBundleMediaTypeAlt =
    "application/vnd.dev.sigstore.bundle+json;version=0.3";
inline constexpr std::string_view kPayloadType = "application/vnd.in-toto+json";

// DSSE v1 PAE: "DSSEv1 <len(type)> <type> <len(payload)> <payload>", decimal byte lengths.
std::string Pae(std::string_view payload_type, std::string_view payload);

// Signs `manifest` (validated; resources sorted into model_signing's order; at least one) with
// the key method. Returns the bundle JSON, compact, without a trailing newline.
absl::StatusOr<std::string> Sign(const Manifest& manifest, const PrivateKey& key,
                                 const Limits& limits = {});

// Signs an arbitrary in-toto statement (`payload`, already written and checked by the caller)
// with the key method: the same bundle layout as Sign. Scan attestations (attestation.h) use it.
absl::StatusOr<std::string> SignPayload(std::string_view payload, const PrivateKey& key);

// The certificate method: `leaf_pem` must certify `key`'s public key; `chain_pem` holds the
// intermediates (may be empty). The bundle records leaf then chain as DER.
absl::StatusOr<std::string> SignWithCertificate(const Manifest& manifest, const PrivateKey& key,
                                                std::string_view leaf_pem,
                                                std::string_view chain_pem,
                                                const Limits& limits = {});

// Which instant a certificate chain must be valid at. kNow is the OMS spec's rule (§8.2);
// kLeafNotBefore is model_signing's (it validates at the leaf's notBefore).
enum class CertificateTime { kNow, kLeafNotBefore };

namespace internal {
struct X509Free {
  void operator()(X509* x) const;
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
}  // namespace internal

// What a verifier trusts: one public key (key method) or a set of CA certificates
// (certificate method). Immutable once built.
class Trust final {
 public:
  static Trust Key(PublicKey key);
  // PEM certificates (one or more, concatenated) used as trust anchors.
  static absl::StatusOr<Trust> CaCertificates(std::string_view pem,
                                              CertificateTime time = CertificateTime::kNow);
  static absl::StatusOr<Trust> CaCertificateFiles(const std::vector<std::string>& paths,
                                                  CertificateTime time = CertificateTime::kNow,
                                                  const Limits& limits = {});

  const PublicKey* key() const { return key_ ? &*key_ : nullptr; }
  const std::vector<internal::X509Ptr>& anchors() const { return anchors_; }
  CertificateTime time() const { return time_; }

 private:
  Trust() = default;
  std::optional<PublicKey> key_;
  std::vector<internal::X509Ptr> anchors_;
  CertificateTime time_ = CertificateTime::kNow;
};

struct VerifiedBundle {
  Manifest manifest;   // what the signature covers
  std::string method;  // "key" or "certificate"
  std::string signer;  // the key's hint, or the leaf certificate's subject
};

// Authenticates a bundle: structure, statement, signature and key/chain. Touches no files.
absl::StatusOr<VerifiedBundle> VerifyBundle(std::string_view bundle_json, const Trust& trust,
                                            const Limits& limits = {});

// What VerifyEnvelope authenticated: the DSSE payload, still unparsed, and who signed it.
struct SignedPayload {
  std::string payload;  // the statement's bytes, exactly as signed
  std::string method;   // "key" or "certificate"
  std::string signer;   // the key's hint, or the leaf certificate's subject
};

// The bundle's structure (steps 1-4 of docs/signing.md: size, strict JSON, media type, DSSE
// payloadType, base64) and its signature (step 6), for a statement of any predicate: the
// caller parses the payload, which nothing here has read. Stricter than VerifyBundle about what
// no signature covers: exactly one DSSE signature, its keyid empty or absent (as SignPayload
// writes it). Touches no files.
absl::StatusOr<SignedPayload> VerifyEnvelope(std::string_view bundle_json, const Trust& trust,
                                             const Limits& limits = {});

struct VerifyOptions {
  // Extra exclusions relative to the model root, on top of the bundle's ignore_paths (the
  // signature file's name belongs here when it lives inside the model directory).
  std::vector<std::string> ignore_paths;
  bool ignore_git_paths = true;
  // Accept files that are present but not signed (model_signing --ignore-unsigned-files).
  bool ignore_unsigned_files = false;
  int threads = 2;
  Limits limits;
};

// VerifyBundle, then hashes `model_path` (directory or single file) with the signed
// serialization and compares.
absl::StatusOr<VerifiedBundle> VerifyModel(std::string_view bundle_json, const Trust& trust,
                                           const std::string& model_path,
                                           const VerifyOptions& options = {});

// VerifyBundle, then compares with digests computed elsewhere (`actual` uses the signed
// serialization method).
absl::StatusOr<VerifiedBundle> VerifyManifest(std::string_view bundle_json, const Trust& trust,
                                              const Manifest& actual,
                                              const VerifyOptions& options = {});

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_BUNDLE_H_
