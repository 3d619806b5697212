// Named limits for everything signing/ reads from untrusted input (bundles, statements,
// model directories). Each is checked before the allocation or the work it bounds; past one,
// the call fails with ResourceExhausted naming the field ("Limits::max_bundle_bytes").
// docs/signing.md tables them.
#ifndef CKPTSCAN_SIGNING_LIMITS_H_
#define CKPTSCAN_SIGNING_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace ckptscan::signing {

struct Limits {
  // Size of the bundle file (JSON). Upstream bundles are a few KiB; a 100,000-resource payload
  // is about 20 MiB of base64.
  size_t max_bundle_bytes = 64u << 20;
  // Size of the decoded DSSE payload (the in-toto statement JSON).
  size_t max_payload_bytes = 48u << 20;
  // JSON nesting (objects + arrays) in the bundle and in the statement. OMS needs 6.
  size_t max_json_depth = 32;
  // JSON values (scalars, objects, arrays) in one document; bounds the DOM we build.
  size_t max_json_values = 2'000'000;
  // Entries in predicate.resources, and resources a directory may hash into.
  size_t max_resources = 100'000;
  // Bytes in one resource name, ignore path or subject name.
  size_t max_name_bytes = 4096;
  // Entries in serialization.ignore_paths.
  size_t max_ignore_paths = 1024;
  // DSSE signatures in the envelope (only the first is checked, as upstream does).
  size_t max_signatures = 16;
  // Certificates in verificationMaterial.x509CertificateChain (leaf + intermediates).
  size_t max_certificates = 10;
  // Regular files a model directory may hold (enumeration stops with an error past it).
  size_t max_files = 100'000;
  // Directory nesting below the model root.
  size_t max_directory_depth = 64;
  // Size of a key or certificate PEM file read from disk.
  size_t max_pem_bytes = 1u << 20;
  // Scan attestations (attestation.h): files (subjects) one statement may attest. A scan's own
  // walk stops at a million entries; a model repository holds a few hundred files.
  size_t max_attested_files = 100'000;
  // Entries in one attested file's lists (rule ids, errors, shards, code files) and limits in
  // the verifier's record. A report holds a few; the rules catalogue has about a hundred ids.
  size_t max_attested_list_entries = 10'000;
};

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_LIMITS_H_
