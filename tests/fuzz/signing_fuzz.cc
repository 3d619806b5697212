// libFuzzer target: the signature-bundle parser (signing/bundle.h, statement.h): the
// input is verified as a bundle with the key method and with the certificate method, and
// parsed as an in-toto statement on its own (the DSSE payload inside a bundle is base64, which
// mutations rarely keep valid; the seeds include decoded payloads).
//
// Trust: the public key and CA of the upstream model_signing test vectors
// (tests/fixtures/oms/model-transparency/keys/certificate/), so the seeds verify and the
// fuzzer starts beyond the signature check.
//
// The input is also verified and parsed as a scan attestation (signing/attestation.h).
//
// Invariants: a verified bundle names its method and its manifest validates; a parsed
// statement's manifest validates, and writing it and parsing it back is a fixed point; a parsed
// scan attestation writes, and its written form parses back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "signing/attestation.h"
#include "signing/bundle.h"
#include "signing/keys.h"
#include "signing/limits.h"
#include "signing/manifest.h"
#include "signing/statement.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Upstream bundles are 2-4 KiB; 64 KiB holds a few hundred resources.
constexpr size_t kMaxInputBytes = 64 << 10;

constexpr char kPublicKeyPem[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEsu6rZGBTjxtvRWPMixT+3HyndV0J0Ybt\n"
    "aHZUcO4DEK+OJHO/4e32bb/fbJKSpRgcBsIpKLcVijUomyFOERbd7u+BTPSUjGZD\n"
    "Qq6J7lTvp/EAXQGOKxW9RP0MGX3qAkvi\n"
    "-----END PUBLIC KEY-----\n";
constexpr char kCaPem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIID9DCCAlygAwIBAgIUMqXRfD5TlsabbQzC0slV583dfHowDQYJKoZIhvcNAQEL\n"
    "BQAwEjEQMA4GA1UEAxMHcm9vdC1jYTAeFw0yNTA1MDIyMzM2MjhaFw0zNTA0MzAy\n"
    "MzM2MjhaMBIxEDAOBgNVBAMTB3Jvb3QtY2EwggGiMA0GCSqGSIb3DQEBAQUAA4IB\n"
    "jwAwggGKAoIBgQC/xiBPWRmrpY4j9XZCaED6T6/uObidGuCGAsjAEusms7M7qvTP\n"
    "pStAW7IfZlx+50fUwbiSuBbZRhvX8rBjh9ta9zKioK0pFydrNWOeWXBG0EDiRYiz\n"
    "lf7kH28H3Fp9M0wE1oNSCwb90yB6YIUnTUMuylgJtsvWe/dZMDu4mPgyTUk9ufyE\n"
    "phTwLPew73USo6RPDn7IJdoEhh5/zlCGv5BewAzXfUN+OLk5tfZGU4CHcNHE98/N\n"
    "DHTdGAtXJ50OZz9GcIa/kMTlzI3xOVylD5p//wXowbHcGKjwlVvIEmen5Hz30pxA\n"
    "TkMYxg2QRmH/AX2vKktTp4NDdvstNA16e4UwHPaQDnE5pINXLnixsLMMTZcbnSzY\n"
    "hMCVDFXSbhv5dzZ671iopWaNQQloNephR71+PtGpGomcwJ0/UNjxoHu+iFOdXx6q\n"
    "poYUj/IGZNZ5S7OEr5SrHzCutckLIIdSjZSQDxS7nqXjRJY0P2kY2zcLDGBzq/It\n"
    "5NjO/ZC62d1KWVMCAwEAAaNCMEAwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8E\n"
    "BAMCAgQwHQYDVR0OBBYEFBBCw8dXtjNLnmpoacShTy1l742lMA0GCSqGSIb3DQEB\n"
    "CwUAA4IBgQAcFEsJPeo7UhTcbX2cHVssGj3MUmcVZ6Ta+ysiYpz2q3sVtdeeK51D\n"
    "nD2g8hzP53rmd6+XOgqcjPkFJR2387sDdwptfVQincoSo6KFa7CZ76w8zJfBGNBp\n"
    "/rb2wygAM7/HRG6TfgD/wrgqfUBZ+VgNIzAbpSRvqRYrSeEfh1oJpeZA0OOgpldX\n"
    "CGCGJbNWQIhX/J608mg2g2CiVO5ALT0d2VMjffymAL7rXx71UoZaOXlGbkB7Ykg7\n"
    "Y1DgLBNGJ7IOpHMYCHggx3haKXs3Hk9bMGLJI5YRVi8b4lyksdOwvxLKqHLBIRbg\n"
    "FQOYTT34nUwWv8uvA7X1tlSVVUtLMG+couscKcorQI6nuY44KqkwwK0v+fSmHyh7\n"
    "UZOSTNdeWSMdMCJi+HLbbFcanW8WyHQ9qACmq2YIjMs6QH+xrKQkn7ARbpnrZnhq\n"
    "F11pOL1EvJG/qooceoDcJDm4I1HNwd4UYmWOIJ+oaGBw3r8OA2mPKQ7r8yVE+SuX\n"
    "fLFGLv//rKc=\n"
    "-----END CERTIFICATE-----\n";

ckptscan::signing::Limits SmallLimits() {
  ckptscan::signing::Limits l;
  l.max_bundle_bytes = kMaxInputBytes;
  l.max_payload_bytes = kMaxInputBytes;
  l.max_json_depth = 16;
  l.max_json_values = 20'000;
  l.max_resources = 1'000;
  l.max_name_bytes = 1024;
  l.max_ignore_paths = 64;
  l.max_signatures = 4;
  l.max_certificates = 4;
  return l;
}

void CheckVerified(const absl::StatusOr<ckptscan::signing::VerifiedBundle>& v,
                   const ckptscan::signing::Limits& limits, std::string_view method) {
  if (!v.ok()) return;
  CKPT_FUZZ_CHECK(v->method == method, "method %s", v->method.c_str());
  const absl::Status valid = ckptscan::signing::ValidateManifest(v->manifest, limits);
  CKPT_FUZZ_CHECK(valid.ok(), "verified, but %s", valid.ToString().c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const signing::Limits limits = SmallLimits();
  static const signing::Trust key_trust = [] {
    absl::StatusOr<signing::PublicKey> key = signing::PublicKey::FromPem(kPublicKeyPem);
    CKPT_FUZZ_CHECK(key.ok(), "%s", key.status().ToString().c_str());
    return signing::Trust::Key(*std::move(key));
  }();
  static const signing::Trust ca_trust = [] {
    absl::StatusOr<signing::Trust> trust =
        signing::Trust::CaCertificates(kCaPem, signing::CertificateTime::kLeafNotBefore);
    CKPT_FUZZ_CHECK(trust.ok(), "%s", trust.status().ToString().c_str());
    return *std::move(trust);
  }();

  CheckVerified(signing::VerifyBundle(bytes, key_trust, limits), limits, "key");
  CheckVerified(signing::VerifyBundle(bytes, ca_trust, limits), limits, "certificate");

  (void)signing::VerifyAttestation(bytes, key_trust, limits);
  if (absl::StatusOr<signing::ScanAttestation> a = signing::ParseAttestation(bytes, limits);
      a.ok()) {
    absl::StatusOr<std::string> written = signing::WriteAttestation(*a, limits);
    CKPT_FUZZ_CHECK(written.ok(), "parsed attestation does not write: %s",
                    written.status().ToString().c_str());
    absl::StatusOr<signing::ScanAttestation> reread = signing::ParseAttestation(*written, limits);
    CKPT_FUZZ_CHECK(reread.ok(), "our own attestation does not parse");
    absl::StatusOr<std::string> rewritten = signing::WriteAttestation(*reread, limits);
    CKPT_FUZZ_CHECK(rewritten.ok() && *rewritten == *written,
                    "attestation write/parse is not a fixed point");
  }

  absl::StatusOr<signing::Manifest> m = signing::ParseStatement(bytes, limits);
  if (!m.ok()) return 0;
  const absl::Status valid = signing::ValidateManifest(*m, limits);
  CKPT_FUZZ_CHECK(valid.ok(), "parsed, but %s", valid.ToString().c_str());
  signing::SortResources(m->serialization.method, &m->resources);
  absl::StatusOr<std::string> written = signing::WriteStatement(*m);
  CKPT_FUZZ_CHECK(written.ok(), "%s", written.status().ToString().c_str());
  absl::StatusOr<signing::Manifest> reread = signing::ParseStatement(*written, limits);
  CKPT_FUZZ_CHECK(reread.ok(), "our own statement does not parse: %s",
                  reread.status().ToString().c_str());
  signing::SortResources(reread->serialization.method, &reread->resources);
  absl::StatusOr<std::string> rewritten = signing::WriteStatement(*reread);
  CKPT_FUZZ_CHECK(rewritten.ok() && *rewritten == *written, "write/parse is not a fixed point");
  return 0;
}
