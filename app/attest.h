// Scan attestations in the application layer: a scan's report turned into the statement of
// signing/attestation.h (`ckptscan scan --attest`), and the policy `ckptscan
// verify-attestation` applies to a verified statement and the local files' digests.
// docs/signing.md ("Scan attestations") describes both.
//
// Trusted side: nothing here parses a scanned file; local files are only hashed.
// Thread-safe: no shared state.
#ifndef CKPTSCAN_APP_ATTEST_H_
#define CKPTSCAN_APP_ATTEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/v1/rules.pb.h"
#include "signing/attestation.h"

namespace ckptscan::app {

// A report file's subject name: its path relative to the command-line folder it was found in,
// or to the directory of the command-line file it is (or whose index named it), so that the
// names do not depend on where the scan ran. A path under no root keeps its own text.
std::string SubjectName(const std::string& path, const std::vector<std::string>& scan_paths);

// What a scan attestation records besides the report.
struct AttestContext {
  std::vector<std::string> scan_paths;   // the command line's PATHs
  std::string rules_sha256;              // RulesDigest of the rules in force
  std::vector<signing::LimitValue> limits;
  absl::Time time;                       // when the scan ended
};

// The SHA-256 of the rules in force (overlay included: it is merged into them), over their
// canonical bytes (rules::CanonicalBytes).
absl::StatusOr<std::string> RulesDigest(const v1::RuleSet& rules);

// The attestation of `report`. FailedPrecondition when a file has no digest (the scan ran
// without one) or the report holds no file; InvalidArgument when a name cannot be written (not
// UTF-8, two files under one name).
absl::StatusOr<signing::ScanAttestation> AttestationOf(const v1::Report& report,
                                                       const AttestContext& context);

// A rules version as verify-attestation compares it: the dotted decimal numbers before any
// "+" (the overlay's part: "2026.12.3+overlay-sha256-..." is 2026.12.3). InvalidArgument for
// anything else (an empty part, a sign, a letter, more than 8 parts or a part over 18 digits).
absl::StatusOr<std::vector<uint64_t>> ParseRulesVersion(std::string_view version);
// <0, 0, >0 as a is older than, the same as, newer than b; missing trailing parts count as 0
// (2026.12 == 2026.12.0).
int CompareRulesVersions(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

struct AttestationPolicy {
  // The worst verdict a file may have: kSafe (every file SAFE) or kSuspicious.
  signing::AttestedVerdict require = signing::AttestedVerdict::kSafe;
  std::string min_rules_version;  // "" = any
};

// A file given to verify-attestation and its SHA-256, hashed here.
struct LocalFile {
  std::string path;
  std::string sha256;
};

// What the policy concluded: one line per file that passed, one problem per failure (each
// naming the file), and scan's exit code for them (0 pass; 1 a recorded verdict or the rules
// version falls short of the policy; 2 a file that is no subject or was not verified (ERROR),
// unless a 1 applies too: findings win over errors, as for scan).
struct PolicyOutcome {
  int exit_code = 0;
  std::vector<std::string> passed;
  std::vector<std::string> problems;
};

// The files against the verified statement: each file's digest must be a subject's; its
// recorded verdict (the worst among subjects of that digest) at least `policy.require`; the
// rules version not older than `policy.min_rules_version` (which the caller has checked parses).
PolicyOutcome CheckAttestationPolicy(const signing::ScanAttestation& attestation,
                                     const std::vector<LocalFile>& files,
                                     const AttestationPolicy& policy);

}  // namespace ckptscan::app

#endif  // CKPTSCAN_APP_ATTEST_H_
