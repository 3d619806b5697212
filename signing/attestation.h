// Scan attestations: an in-toto Statement v1 whose subjects are the scanned files (name and
// SHA-256) and whose predicate is in-toto's Simple Verification Result (SVR, predicateType
// https://in-toto.io/attestation/svr/v0.1), signed as a DSSE envelope in a Sigstore bundle v0.3
// with the key machinery of bundle.h. docs/signing.md ("Scan attestations") has the layout,
// the checks and why SVR rather than SLSA's Verification Summary Attestation.
//
// SVR's fields hold what is true of every subject (`properties`); what the scanner saw per
// file, and the rules, limits and version it judged with, are extension fields (in-toto's
// parsing rules allow them on any object): `verifier.ckptscanVersion`, `verifier.ckptscanRules`,
// `verifier.ckptscanLimits` and `predicate.ckptscanFiles` (one entry per subject, same order,
// same name). A consumer that ignores them reads only the properties, which never claim more
// than the files do.
//
// ParseAttestation trusts nothing: every size is bounded by Limits, the JSON is strict
// (strict_json.h), and the per-file records must agree with the subjects and the properties (a
// SAFE verdict for a file whose reading did not complete is refused). Thread-safe: no shared
// state.
//
//   CKPT_ASSIGN_OR_RETURN(std::string bundle, signing::SignAttestation(attestation, key));
//   ...
//   CKPT_ASSIGN_OR_RETURN(signing::VerifiedAttestation v,
//                         signing::VerifyAttestation(bundle, signing::Trust::Key(pub)));
#ifndef CKPTSCAN_SIGNING_ATTESTATION_H_
#define CKPTSCAN_SIGNING_ATTESTATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "signing/bundle.h"
#include "signing/keys.h"
#include "signing/limits.h"

namespace ckptscan::signing {

inline constexpr std::string_view kSvrPredicateType = "https://in-toto.io/attestation/svr/v0.1";
// verifier.id is this followed by the scanner version ("https://...releases/tag/v0.1.0"): SVR
// asks for an identifier that changes when the verification logic does.
inline constexpr std::string_view kVerifierIdPrefix =
    "https://github.com/ckptscan/ckptscan/releases/tag/v";

// The SVR properties a scan attestation may assert, each only when it holds for every subject.
inline constexpr std::string_view kPropertyReadComplete = "CKPTSCAN_READ_COMPLETE";
inline constexpr std::string_view kPropertyNotDangerous = "CKPTSCAN_NOT_DANGEROUS";
inline constexpr std::string_view kPropertyVerdictSafe = "CKPTSCAN_VERDICT_SAFE";

// A file's verdict, best first: a policy "at least V" accepts V and the ones before it.
enum class AttestedVerdict { kSafe, kSuspicious, kDangerous, kError };
std::string_view AttestedVerdictName(AttestedVerdict v);  // "SAFE", "SUSPICIOUS", ...
std::optional<AttestedVerdict> ParseAttestedVerdict(std::string_view name);

struct AttestedFile {
  std::string name;    // the subject's name: the path relative to the scanned folder or file's
                       // directory
  std::string sha256;  // 64 lowercase hex digits of the bytes the worker parsed
  AttestedVerdict verdict = AttestedVerdict::kError;
  std::string format;  // the report's format ("torch-zip", ...); "" when none was recognized
  std::string kind;    // the report's kind ("model", "data", ...); "" when not read to the end
  // The reading covered the whole file: no error, a kind. Never true for ERROR; always true
  // for SAFE.
  bool complete = false;
  uint64_t pickles = 0;  // pickle streams scanned, nested ones included
  uint64_t globals = 0;  // globals seen
  uint64_t tensors = 0;  // tensors found
  std::vector<std::string> shards;      // an index's shard names (format "hf-index")
  std::vector<std::string> code_files;  // a TorchScript archive's code members
  std::vector<std::string> rule_ids;    // the findings' rule ids, distinct, sorted
  std::vector<std::string> errors;      // error codes ("malformed", "limit:max_opcodes")
};

struct LimitValue {
  std::string name;  // as --limit names it
  uint64_t value = 0;
};

struct ScanAttestation {
  std::string scanner_version;  // also in verifier.id
  std::string rules_version;    // the report's rules_version ("2026.12.3+overlay-sha256-...")
  std::string rules_sha256;     // of the rules in force, overlay included
  std::vector<LimitValue> limits;
  std::string time_created;  // RFC 3339, UTC, seconds: "2026-12-10T09:30:00Z"
  std::vector<AttestedFile> files;
};

// The properties `files` support (kPropertyReadComplete, kPropertyNotDangerous,
// kPropertyVerdictSafe, in that order, each only when every file has it).
std::vector<std::string> PropertiesOf(const std::vector<AttestedFile>& files);

// The statement's JSON (keys sorted, two-space indent, no trailing newline): deterministic.
// InvalidArgument when the attestation would not pass ParseAttestation.
absl::StatusOr<std::string> WriteAttestation(const ScanAttestation& attestation,
                                             const Limits& limits = {});

// Parses and checks a statement (docs/signing.md lists every check). InvalidArgument names the
// field ("attestation: predicate.ckptscanFiles[2].verdict ..."); ResourceExhausted the Limits
// field.
absl::StatusOr<ScanAttestation> ParseAttestation(std::string_view payload,
                                                 const Limits& limits = {});

// WriteAttestation, then a bundle signed with `key` (key method, as bundle.h's Sign).
absl::StatusOr<std::string> SignAttestation(const ScanAttestation& attestation,
                                            const PrivateKey& key, const Limits& limits = {});

struct VerifiedAttestation {
  ScanAttestation attestation;
  std::string method;  // "key" or "certificate"
  std::string signer;  // the key's hint, or the leaf certificate's subject
};

// The bundle and its signature (VerifyEnvelope), then ParseAttestation over the signed bytes:
// nothing of the statement is read before the signature verified.
absl::StatusOr<VerifiedAttestation> VerifyAttestation(std::string_view bundle_json,
                                                      const Trust& trust,
                                                      const Limits& limits = {});

}  // namespace ckptscan::signing

#endif  // CKPTSCAN_SIGNING_ATTESTATION_H_
