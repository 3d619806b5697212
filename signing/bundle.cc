#include "signing/bundle.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "signing/encoding.h"
#include "signing/statement.h"
#include "signing/strict_json.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

constexpr std::string_view kDoc = "bundle";

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_free(s); }
};

// model_signing 0.2 signed Python's str(bytes) inside its PAE ("DSSEV1 ... b'...'");
// model_signing's key verifier still accepts that as a fallback, and so do we (key method only).
std::string PythonBytesRepr(std::string_view b) {
  const bool has_single = b.find('\'') != std::string_view::npos;
  const bool has_double = b.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "b";
  out.push_back(quote);
  for (char ch : b) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (ch == '\t') {
      out.append("\\t");
    } else if (ch == '\n') {
      out.append("\\n");
    } else if (ch == '\r') {
      out.append("\\r");
    } else if (c < 0x20 || c >= 0x7f) {
      out.append("\\x");
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back(quote);
  return out;
}

std::string PaeCompat(std::string_view payload) {
  return absl::StrCat("DSSEV1 ", kPayloadType.size(), " ", AbslView(kPayloadType), " ",
                      payload.size(), " ", PythonBytesRepr(payload));
}

absl::StatusOr<std::string> SignPae(const PrivateKey& key, std::string_view message) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return absl::InternalError("EVP_MD_CTX_new failed");
  if (EVP_DigestSignInit(ctx.get(), nullptr, DigestForCurve(key.curve()), nullptr, key.get()) !=
      1) {
    return absl::InternalError("EVP_DigestSignInit failed: " + OpenSslError());
  }
  const auto* data = reinterpret_cast<const unsigned char*>(message.data());
  size_t len = 0;
  if (EVP_DigestSign(ctx.get(), nullptr, &len, data, message.size()) != 1) {
    return absl::InternalError("EVP_DigestSign (size) failed: " + OpenSslError());
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, data,
                     message.size()) != 1) {
    return absl::InternalError("EVP_DigestSign failed: " + OpenSslError());
  }
  sig.resize(len);
  return sig;
}

// True when the DER ECDSA signature verifies; false when it does not; error when OpenSSL
// cannot run the check at all.
absl::StatusOr<bool> VerifyPae(const PublicKey& key, std::string_view sig,
                               std::string_view message) {
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (ctx == nullptr) return absl::InternalError("EVP_MD_CTX_new failed");
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, DigestForCurve(key.curve()), nullptr, key.get()) !=
      1) {
    return absl::InternalError("EVP_DigestVerifyInit failed: " + OpenSslError());
  }
  const int rc =
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size());
  ERR_clear_error();
  return rc == 1;
}

absl::StatusOr<std::vector<internal::X509Ptr>> ReadPemCertificates(std::string_view pem,
                                                                   std::string_view what) {
  if (pem.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(what), ": too large"));
  }
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return absl::InternalError("BIO_new_mem_buf failed");
  std::vector<internal::X509Ptr> out;
  for (;;) {
    internal::X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    out.push_back(std::move(cert));
  }
  const unsigned long err = ERR_peek_last_error();
  const bool clean_end =
      ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
  if (err != 0 && !clean_end) {
    return absl::InvalidArgumentError(
        absl::StrCat(AbslView(what), ": unreadable PEM certificate: ", OpenSslError()));
  }
  ERR_clear_error();
  return out;
}

std::string SubjectOf(X509* cert) {
  char buf[512];
  if (X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

std::string BundleJson(std::string_view verification_material, std::string_view payload,
                       std::string_view sig) {
  std::string o;
  absl::StrAppend(&o, "{\"mediaType\":", Quoted(kBundleMediaType),
                  ",\"verificationMaterial\":", AbslView(verification_material),
                  ",\"dsseEnvelope\":{\"payload\":\"", Base64Encode(payload),
                  "\",\"payloadType\":", Quoted(kPayloadType), ",\"signatures\":[{\"sig\":\"",
                  Base64Encode(sig), "\",\"keyid\":\"\"}]}}");
  return o;
}

// Validates, sorts and writes the statement; checks it reads back.
absl::StatusOr<std::string> PreparePayload(const Manifest& manifest, const Limits& limits) {
  Manifest m = manifest;
  if (m.resources.empty()) {
    return absl::InvalidArgumentError("nothing to sign: the manifest has no resources");
  }
  if (absl::Status s = ValidateManifest(m, limits); !s.ok()) return s;
  SortResources(m.serialization.method, &m.resources);
  absl::StatusOr<std::string> payload = WriteStatement(m);
  if (!payload.ok()) return payload.status();
  if (absl::StatusOr<Manifest> back = ParseStatement(*payload, limits); !back.ok()) {
    return absl::InternalError(
        absl::StrCat("the statement we wrote does not read back: ", back.status().message()));
  }
  return payload;
}

enum class BundleMethod { kKey, kCertificate };

struct ParsedBundle {
  BundleMethod method;
  const Json* public_key = nullptr;  // verificationMaterial.publicKey
  const Json* chain = nullptr;       // verificationMaterial.x509CertificateChain.certificates
  std::string payload;               // decoded
  std::string sig;                   // decoded signatures[0].sig
  size_t signatures = 0;             // dsseEnvelope.signatures
  bool keyid_set = false;            // signatures[0].keyid is a non-empty string
};

absl::Status CheckKnownFields(const Json& obj, std::string_view path,
                              std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: unknown field %s%s%s", AbslView(kDoc),
                                                        AbslView(path), path.empty() ? "" : ".",
                                                        AbslView(Esc(it.key()))));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParsedBundle> ParseBundle(const Json& b, const Limits& limits) {
  if (!b.is_object()) return WrongType(kDoc, "the bundle", "an object", b);
  if (absl::Status s = CheckKnownFields(
          b, "", {"mediaType", "verificationMaterial", "dsseEnvelope", "messageSignature"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const std::string*> media = RequiredString(b, "mediaType", kDoc, "mediaType");
  if (!media.ok()) return media.status();
  if (**media != kBundleMediaType && **media != kBundleMediaTypeAlt) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unsupported mediaType %s (expected %s)", AbslView(kDoc),
                        AbslView(Esc(Quoted(**media))), AbslView(Quoted(kBundleMediaType))));
  }
  if (FindField(b, "messageSignature") != nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: holds a messageSignature; OMS bundles carry a dsseEnvelope", AbslView(kDoc)));
  }
  absl::StatusOr<const Json*> vm =
      RequiredObject(b, "verificationMaterial", kDoc, "verificationMaterial");
  if (!vm.ok()) return vm.status();
  absl::StatusOr<const Json*> env = RequiredObject(b, "dsseEnvelope", kDoc, "dsseEnvelope");
  if (!env.ok()) return env.status();

  ParsedBundle out;
  // verificationMaterial
  if (absl::Status s = CheckKnownFields(**vm, "verificationMaterial",
                                        {"publicKey", "x509CertificateChain", "certificate",
                                         "tlogEntries", "timestampVerificationData"});
      !s.ok()) {
    return s;
  }
  const Json* tlog = FindField(**vm, "tlogEntries");
  if (tlog != nullptr && !tlog->is_array()) {
    return WrongType(kDoc, "verificationMaterial.tlogEntries", "an array", *tlog);
  }
  const Json* pk = FindField(**vm, "publicKey");
  const Json* chain = FindField(**vm, "x509CertificateChain");
  const Json* fulcio = FindField(**vm, "certificate");
  const int methods = (pk != nullptr) + (chain != nullptr) + (fulcio != nullptr);
  if (methods == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: verificationMaterial holds none of publicKey, x509CertificateChain, certificate",
        AbslView(kDoc)));
  }
  if (methods > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: verificationMaterial holds more than one of publicKey, x509CertificateChain, "
        "certificate",
        AbslView(kDoc)));
  }
  if (fulcio != nullptr) {
    if (tlog == nullptr || tlog->empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: verificationMaterial.tlogEntries is %s: the sigstore method (a Fulcio "
          "certificate) requires at least one transparency log entry",
          AbslView(kDoc), tlog == nullptr ? "missing" : "empty"));
    }
    return absl::UnimplementedError(absl::StrFormat(
        "%s: uses the sigstore (keyless) method, which needs Fulcio and Rekor verification; "
        "ckptscan verifies only the key and certificate methods (offline)",
        AbslView(kDoc)));
  }
  if (pk != nullptr) {
    if (!pk->is_object())
      return WrongType(kDoc, "verificationMaterial.publicKey", "an object", *pk);
    if (absl::Status s = CheckKnownFields(*pk, "verificationMaterial.publicKey",
                                          {"hint", "rawBytes", "keyDetails"});
        !s.ok()) {
      return s;
    }
    out.method = BundleMethod::kKey;
    out.public_key = pk;
  } else {
    if (!chain->is_object()) {
      return WrongType(kDoc, "verificationMaterial.x509CertificateChain", "an object", *chain);
    }
    absl::StatusOr<const Json*> certs = RequiredArray(
        *chain, "certificates", kDoc, "verificationMaterial.x509CertificateChain.certificates");
    if (!certs.ok()) return certs.status();
    if ((*certs)->empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: verificationMaterial.x509CertificateChain.certificates is empty", AbslView(kDoc)));
    }
    if ((*certs)->size() > limits.max_certificates) {
      return base::LimitError(
          absl::StrFormat("%s: %d certificates in the chain, over Limits::max_certificates (%d)",
                          AbslView(kDoc), (*certs)->size(), limits.max_certificates),
          "max_certificates", limits.max_certificates);
    }
    out.method = BundleMethod::kCertificate;
    out.chain = *certs;
  }

  // dsseEnvelope
  if (absl::Status s =
          CheckKnownFields(**env, "dsseEnvelope", {"payload", "payloadType", "signatures"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const std::string*> ptype =
      RequiredString(**env, "payloadType", kDoc, "dsseEnvelope.payloadType");
  if (!ptype.ok()) return ptype.status();
  if (**ptype != kPayloadType) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unsupported dsseEnvelope.payloadType %s (expected %s)", AbslView(kDoc),
                        AbslView(Esc(Quoted(**ptype))), AbslView(Quoted(kPayloadType))));
  }
  absl::StatusOr<const std::string*> payload_b64 =
      RequiredString(**env, "payload", kDoc, "dsseEnvelope.payload");
  if (!payload_b64.ok()) return payload_b64.status();
  if ((*payload_b64)->size() / 4 * 3 > limits.max_payload_bytes) {
    return base::LimitError(
        absl::StrFormat("%s: dsseEnvelope.payload decodes to about %d bytes, over "
                        "Limits::max_payload_bytes (%d)",
                        AbslView(kDoc), (*payload_b64)->size() / 4 * 3, limits.max_payload_bytes),
        "max_payload_bytes", limits.max_payload_bytes);
  }
  absl::StatusOr<std::string> payload = Base64Decode(**payload_b64, "bundle: dsseEnvelope.payload");
  if (!payload.ok()) return payload.status();
  out.payload = *std::move(payload);
  absl::StatusOr<const Json*> sigs =
      RequiredArray(**env, "signatures", kDoc, "dsseEnvelope.signatures");
  if (!sigs.ok()) return sigs.status();
  if ((*sigs)->empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: dsseEnvelope.signatures is empty", AbslView(kDoc)));
  }
  if ((*sigs)->size() > limits.max_signatures) {
    return base::LimitError(
        absl::StrFormat("%s: %d DSSE signatures, over Limits::max_signatures (%d)", AbslView(kDoc),
                        (*sigs)->size(), limits.max_signatures),
        "max_signatures", limits.max_signatures);
  }
  for (size_t i = 0; i < (*sigs)->size(); ++i) {
    const Json& s = (**sigs)[i];
    const std::string path = absl::StrFormat("dsseEnvelope.signatures[%d]", i);
    if (!s.is_object()) return WrongType(kDoc, path, "an object", s);
    if (absl::Status st = CheckKnownFields(s, path, {"sig", "keyid"}); !st.ok()) return st;
    absl::StatusOr<const std::string*> sig = RequiredString(s, "sig", kDoc, path + ".sig");
    if (!sig.ok()) return sig.status();
    if (const Json* keyid = FindField(s, "keyid");
        keyid != nullptr && !keyid->is_null() && !keyid->is_string()) {
      return WrongType(kDoc, path + ".keyid", "a string or null", *keyid);
    }
    absl::StatusOr<std::string> raw =
        Base64Decode(**sig, absl::StrCat(AbslView(kDoc), ": ", path, ".sig"));
    if (!raw.ok()) return raw.status();
    if (raw->empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s.sig is empty", AbslView(kDoc), path));
    }
    // model_signing checks signatures[0] only; so do we, after checking the others' shape.
    if (i == 0) {
      out.sig = *std::move(raw);
      const Json* keyid = FindField(s, "keyid");
      out.keyid_set = keyid != nullptr && keyid->is_string() &&
                      !keyid->get_ref<const std::string&>().empty();
    }
  }
  out.signatures = (*sigs)->size();
  return out;
}

absl::Status BadSignature(const PublicKey& key, std::string_view whose) {
  return absl::UnauthenticatedError(absl::StrFormat(
      "bad signature: the DSSE signature does not verify with %s (ECDSA %s) over the payload",
      AbslView(whose), AbslView(CurveName(key.curve()))));
}

absl::Status VerifyKeyMethod(const ParsedBundle& pb, const PublicKey& key, VerifiedBundle* out) {
  const Json& pk = *pb.public_key;
  if (const Json* hint = FindField(pk, "hint"); hint != nullptr && !hint->is_null()) {
    if (!hint->is_string()) {
      return WrongType(kDoc, "verificationMaterial.publicKey.hint", "a string", *hint);
    }
    const std::string& h = hint->get_ref<const std::string&>();
    if (!h.empty() && h != key.hint()) {
      return absl::UnauthenticatedError(absl::StrFormat(
          "wrong key: the bundle was signed by the key with hint %s, but the given public key's "
          "hint is %s",
          AbslView(Esc(h.substr(0, 80))), key.hint()));
    }
  }
  if (const Json* raw = FindField(pk, "rawBytes"); raw != nullptr) {
    // model_signing < 1.1 recorded the PEM public key itself.
    if (!raw->is_string()) {
      return WrongType(kDoc, "verificationMaterial.publicKey.rawBytes", "a string", *raw);
    }
    absl::StatusOr<std::string> pem = Base64Decode(
        raw->get_ref<const std::string&>(), "bundle: verificationMaterial.publicKey.rawBytes");
    if (!pem.ok()) return pem.status();
    absl::StatusOr<PublicKey> recorded = PublicKey::FromPem(*pem);
    if (!recorded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bundle: verificationMaterial.publicKey.rawBytes: ", recorded.status().message()));
    }
    if (!recorded->Equals(key)) {
      return absl::UnauthenticatedError(absl::StrFormat(
          "wrong key: the bundle records public key %s (hint), not the given key (hint %s)",
          recorded->hint(), key.hint()));
    }
  }
  absl::StatusOr<bool> ok = VerifyPae(key, pb.sig, Pae(kPayloadType, pb.payload));
  if (!ok.ok()) return ok.status();
  if (!*ok) {
    absl::StatusOr<bool> compat = VerifyPae(key, pb.sig, PaeCompat(pb.payload));
    if (!compat.ok()) return compat.status();
    if (!*compat) return BadSignature(key, "the given public key");
  }
  out->method = "key";
  out->signer = key.hint();
  return absl::OkStatus();
}

absl::Status VerifyCertificateMethod(const ParsedBundle& pb, const Trust& trust,
                                     VerifiedBundle* out) {
  std::vector<internal::X509Ptr> certs;
  for (size_t i = 0; i < pb.chain->size(); ++i) {
    const Json& c = (*pb.chain)[i];
    const std::string path =
        absl::StrFormat("verificationMaterial.x509CertificateChain.certificates[%d]", i);
    if (!c.is_object()) return WrongType(kDoc, path, "an object", c);
    absl::StatusOr<const std::string*> raw =
        RequiredString(c, "rawBytes", kDoc, path + ".rawBytes");
    if (!raw.ok()) return raw.status();
    absl::StatusOr<std::string> der = Base64Decode(**raw, absl::StrCat(AbslView(kDoc), ": ", path));
    if (!der.ok()) return der.status();
    const unsigned char* p = reinterpret_cast<const unsigned char*>(der->data());
    internal::X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der->size())));
    if (cert == nullptr || p != reinterpret_cast<const unsigned char*>(der->data()) + der->size()) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s.rawBytes is not one DER X.509 certificate", AbslView(kDoc), path));
    }
    certs.push_back(std::move(cert));
  }
  X509* leaf = certs[0].get();

  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  std::unique_ptr<STACK_OF(X509), StackFree> untrusted(sk_X509_new_null());
  if (store == nullptr || ctx == nullptr || untrusted == nullptr) {
    return absl::InternalError("X509 store allocation failed");
  }
  for (const internal::X509Ptr& a : trust.anchors()) {
    if (X509_STORE_add_cert(store.get(), a.get()) != 1) ERR_clear_error();  // duplicates
  }
  for (size_t i = 1; i < certs.size(); ++i) {
    if (sk_X509_push(untrusted.get(), certs[i].get()) <= 0) {
      return absl::InternalError("sk_X509_push failed");
    }
  }
  if (X509_STORE_CTX_init(ctx.get(), store.get(), leaf, untrusted.get()) != 1) {
    return absl::InternalError("X509_STORE_CTX_init failed: " + OpenSslError());
  }
  if (trust.time() == CertificateTime::kLeafNotBefore) {
    struct tm tm = {};
    if (ASN1_TIME_to_tm(X509_get0_notBefore(leaf), &tm) != 1) {
      return absl::InvalidArgumentError("bundle: the leaf certificate's notBefore is unreadable");
    }
    X509_STORE_CTX_set_time(ctx.get(), 0, timegm(&tm));
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    const int depth = X509_STORE_CTX_get_error_depth(ctx.get());
    ERR_clear_error();
    return absl::UnauthenticatedError(
        absl::StrFormat("untrusted certificate chain: %s (certificate at depth %d; leaf %s)",
                        X509_verify_cert_error_string(err), depth, AbslView(Esc(SubjectOf(leaf)))));
  }
  const uint32_t ku = X509_get_key_usage(leaf);
  const bool has_ku = (X509_get_extension_flags(leaf) & EXFLAG_KUSAGE) != 0;
  const bool code_signing = (X509_get_extension_flags(leaf) & EXFLAG_XKUSAGE) != 0 &&
                            (X509_get_extended_key_usage(leaf) & XKU_CODE_SIGN) != 0;
  if (!(has_ku && (ku & KU_DIGITAL_SIGNATURE) != 0) && !code_signing) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "the leaf certificate %s may not sign: it has neither KeyUsage digitalSignature nor "
        "ExtendedKeyUsage codeSigning",
        AbslView(Esc(SubjectOf(leaf)))));
  }
  EVP_PKEY* leaf_key = X509_get0_pubkey(leaf);
  if (leaf_key == nullptr) {
    return absl::InvalidArgumentError("bundle: the leaf certificate's public key is unreadable");
  }
  absl::StatusOr<PublicKey> key = PublicKey::FromPkey(leaf_key);
  if (!key.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bundle: leaf certificate: ", key.status().message()));
  }
  absl::StatusOr<bool> ok = VerifyPae(*key, pb.sig, Pae(kPayloadType, pb.payload));
  if (!ok.ok()) return ok.status();
  if (!*ok) return BadSignature(*key, "the leaf certificate's key");
  out->method = "certificate";
  out->signer = SubjectOf(leaf);
  return absl::OkStatus();
}

// Steps 1-4 of docs/signing.md: the size, strict JSON, the bundle's and envelope's structure.
// The result points into `*doc`, which must outlive it.
absl::StatusOr<ParsedBundle> ReadBundle(std::string_view bundle_json, const Limits& limits,
                                        Json* doc) {
  if (bundle_json.size() > limits.max_bundle_bytes) {
    return base::LimitError(absl::StrFormat("bundle: %d bytes, over Limits::max_bundle_bytes (%d)",
                                            bundle_json.size(), limits.max_bundle_bytes),
                            "max_bundle_bytes", limits.max_bundle_bytes);
  }
  absl::StatusOr<Json> parsed = ParseStrictJson(bundle_json, kDoc, limits);
  if (!parsed.ok()) return parsed.status();
  *doc = *std::move(parsed);
  return ParseBundle(*doc, limits);
}

// Step 6: the signature with the trusted key, or the chain to the trusted CAs and the leaf's key.
absl::Status Authenticate(const ParsedBundle& pb, const Trust& trust, VerifiedBundle* out) {
  if (pb.method == BundleMethod::kKey) {
    if (trust.key() == nullptr) {
      return absl::UnauthenticatedError(
          "bundle uses the key method (verificationMaterial.publicKey) but a certificate trust "
          "policy was given: verify it with the signer's public key");
    }
    return VerifyKeyMethod(pb, *trust.key(), out);
  }
  if (trust.anchors().empty()) {
    return absl::UnauthenticatedError(
        "bundle uses the certificate method (verificationMaterial.x509CertificateChain) but a "
        "public key was given: verify it with the CA certificates");
  }
  return VerifyCertificateMethod(pb, trust, out);
}

}  // namespace

void internal::X509Free::operator()(X509* x) const { X509_free(x); }

std::string Pae(std::string_view payload_type, std::string_view payload) {
  return absl::StrCat("DSSEv1 ", payload_type.size(), " ", AbslView(payload_type), " ",
                      payload.size(), " ", AbslView(payload));
}

absl::StatusOr<std::string> Sign(const Manifest& manifest, const PrivateKey& key,
                                 const Limits& limits) {
  absl::StatusOr<std::string> payload = PreparePayload(manifest, limits);
  if (!payload.ok()) return payload.status();
  return SignPayload(*payload, key);
}

absl::StatusOr<std::string> SignPayload(std::string_view payload, const PrivateKey& key) {
  absl::StatusOr<std::string> sig = SignPae(key, Pae(kPayloadType, payload));
  if (!sig.ok()) return sig.status();
  const std::string vm = absl::StrCat("{\"publicKey\":{\"hint\":\"", key.public_key().hint(),
                                      "\"},\"tlogEntries\":[]}");
  return BundleJson(vm, payload, *sig);
}

absl::StatusOr<std::string> SignWithCertificate(const Manifest& manifest, const PrivateKey& key,
                                                std::string_view leaf_pem,
                                                std::string_view chain_pem, const Limits& limits) {
  absl::StatusOr<std::vector<internal::X509Ptr>> leaf =
      ReadPemCertificates(leaf_pem, "signing certificate");
  if (!leaf.ok()) return leaf.status();
  if (leaf->size() != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "signing certificate: expected exactly one PEM certificate, found %d", leaf->size()));
  }
  absl::StatusOr<std::vector<internal::X509Ptr>> chain =
      ReadPemCertificates(chain_pem, "certificate chain");
  if (!chain.ok()) return chain.status();
  EVP_PKEY* leaf_key = X509_get0_pubkey((*leaf)[0].get());
  if (leaf_key == nullptr || EVP_PKEY_eq(leaf_key, key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the signing certificate does not certify the private key's public key");
  }
  std::string vm = "{\"x509CertificateChain\":{\"certificates\":[";
  bool first = true;
  auto add = [&](X509* c) -> absl::Status {
    unsigned char* der = nullptr;
    const int n = i2d_X509(c, &der);
    if (n <= 0) return absl::InternalError("i2d_X509 failed: " + OpenSslError());
    absl::StrAppend(
        &vm, first ? "" : ",", "{\"rawBytes\":\"",
        Base64Encode(std::string_view(reinterpret_cast<char*>(der), static_cast<size_t>(n))),
        "\"}");
    OPENSSL_free(der);
    first = false;
    return absl::OkStatus();
  };
  if (absl::Status s = add((*leaf)[0].get()); !s.ok()) return s;
  for (const internal::X509Ptr& c : *chain) {
    if (absl::Status s = add(c.get()); !s.ok()) return s;
  }
  absl::StrAppend(&vm, "]},\"tlogEntries\":[]}");
  absl::StatusOr<std::string> payload = PreparePayload(manifest, limits);
  if (!payload.ok()) return payload.status();
  absl::StatusOr<std::string> sig = SignPae(key, Pae(kPayloadType, *payload));
  if (!sig.ok()) return sig.status();
  return BundleJson(vm, *payload, *sig);
}

Trust Trust::Key(PublicKey key) {
  Trust t;
  t.key_.emplace(std::move(key));
  return t;
}

absl::StatusOr<Trust> Trust::CaCertificates(std::string_view pem, CertificateTime time) {
  absl::StatusOr<std::vector<internal::X509Ptr>> certs =
      ReadPemCertificates(pem, "CA certificates");
  if (!certs.ok()) return certs.status();
  if (certs->empty()) {
    return absl::InvalidArgumentError("CA certificates: no PEM certificate found");
  }
  Trust t;
  t.anchors_ = *std::move(certs);
  t.time_ = time;
  return t;
}

absl::StatusOr<Trust> Trust::CaCertificateFiles(const std::vector<std::string>& paths,
                                                CertificateTime time, const Limits& limits) {
  std::string all;
  for (const std::string& p : paths) {
    absl::StatusOr<std::string> pem = ReadSmallFile(p, limits.max_pem_bytes, "max_pem_bytes");
    if (!pem.ok()) return pem.status();
    absl::StrAppend(&all, *pem, "\n");
  }
  absl::StatusOr<Trust> t = CaCertificates(all, time);
  if (!t.ok() && !paths.empty()) {
    return base::Reworded(t.status(), absl::StrCat(t.status().message(), " (in ", paths[0],
                                                   paths.size() > 1 ? " ..." : "", ")"));
  }
  return t;
}

absl::StatusOr<VerifiedBundle> VerifyBundle(std::string_view bundle_json, const Trust& trust,
                                            const Limits& limits) {
  Json doc;
  absl::StatusOr<ParsedBundle> pb = ReadBundle(bundle_json, limits, &doc);
  if (!pb.ok()) return pb.status();
  // The statement is checked before the signature, so that a malformed one is reported as such.
  absl::StatusOr<Manifest> manifest = ParseStatement(pb->payload, limits);
  if (!manifest.ok()) return manifest.status();
  VerifiedBundle out;
  if (absl::Status s = Authenticate(*pb, trust, &out); !s.ok()) return s;
  out.manifest = *std::move(manifest);
  return out;
}

absl::StatusOr<SignedPayload> VerifyEnvelope(std::string_view bundle_json, const Trust& trust,
                                             const Limits& limits) {
  Json doc;
  absl::StatusOr<ParsedBundle> pb = ReadBundle(bundle_json, limits, &doc);
  if (!pb.ok()) return pb.status();
  // What SignPayload writes, and nothing else: a signature or key id that nothing checks would
  // be bytes in a signed document that an attacker may change.
  if (pb->signatures != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dsseEnvelope.signatures holds %d signatures; this bundle must hold exactly one",
        AbslView(kDoc), pb->signatures));
  }
  if (pb->keyid_set) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dsseEnvelope.signatures[0].keyid is set; the key is named by "
        "verificationMaterial only (keyid must be empty)",
        AbslView(kDoc)));
  }
  VerifiedBundle who;
  if (absl::Status s = Authenticate(*pb, trust, &who); !s.ok()) return s;
  return SignedPayload{std::move(pb->payload), std::move(who.method), std::move(who.signer)};
}

absl::StatusOr<VerifiedBundle> VerifyManifest(std::string_view bundle_json, const Trust& trust,
                                              const Manifest& actual,
                                              const VerifyOptions& options) {
  absl::StatusOr<VerifiedBundle> v = VerifyBundle(bundle_json, trust, options.limits);
  if (!v.ok()) return v.status();
  if (actual.serialization.method != v->manifest.serialization.method ||
      (actual.serialization.method == Method::kShards &&
       actual.serialization.shard_size != v->manifest.serialization.shard_size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the digests given were computed with method \"%s\", the bundle signs \"%s\"",
        AbslView(MethodName(actual.serialization.method)),
        AbslView(MethodName(v->manifest.serialization.method))));
  }
  if (absl::Status s = CompareManifests(v->manifest, actual, options.ignore_unsigned_files);
      !s.ok()) {
    return s;
  }
  return v;
}

absl::StatusOr<VerifiedBundle> VerifyModel(std::string_view bundle_json, const Trust& trust,
                                           const std::string& model_path,
                                           const VerifyOptions& options) {
  absl::StatusOr<VerifiedBundle> v = VerifyBundle(bundle_json, trust, options.limits);
  if (!v.ok()) return v.status();
  const Manifest& signed_manifest = v->manifest;
  HashOptions h;
  h.serialization = signed_manifest.serialization;
  for (const std::string& p : options.ignore_paths) h.serialization.ignore_paths.push_back(p);
  h.ignore_git_paths = options.ignore_git_paths;
  h.threads = options.threads;
  h.limits = options.limits;
  const bool shards = signed_manifest.serialization.method == Method::kShards;
  if (options.ignore_unsigned_files) {
    std::set<std::string> only;
    for (const Resource& r : signed_manifest.resources) {
      if (!shards) {
        only.insert(r.name);
      } else if (absl::StatusOr<ShardName> s = ParseShardName(r.name); s.ok()) {
        only.insert(std::string(s->path));
      }
    }
    h.only_files = std::move(only);
  }
  absl::StatusOr<Manifest> actual = HashModel(model_path, h);
  if (!actual.ok()) return actual.status();
  // A single-file model: model_signing names its resource "."; the spec says its basename.
  if (!shards && actual->resources.size() == 1 && actual->resources[0].name == "." &&
      signed_manifest.resources.size() == 1 && signed_manifest.resources[0].name != ".") {
    actual->resources[0].name = actual->model_name;
  }
  if (absl::Status s = CompareManifests(signed_manifest, *actual, options.ignore_unsigned_files);
      !s.ok()) {
    return s;
  }
  return v;
}

}  // namespace ckptscan::signing
