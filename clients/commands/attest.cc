// `ckptscan verify-attestation`: a scan attestation (scan --attest) checked offline against
// local files: the signature, every file's SHA-256 among the subjects, and the policy. The
// files are hashed here and never parsed.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "app/attest.h"
#include "app/report_format.h"
#include "app/scan_targets.h"
#include "app/verdict.h"
#include "base/mapped_file.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "clients/cli_common.h"
#include "signing/attestation.h"
#include "signing/keys.h"

namespace ckptscan::clients {
namespace {

using app::TerminalSafe;
using base::WriteAll;

struct VerifyAttestationOptions {
  std::string bundle;
  std::string key;
  std::string require = "SAFE";
  std::string min_rules_version;
  std::vector<std::string> paths;
};

// The SHA-256 of a local file (symbolic links followed, as scan follows a named PATH): read,
// never parsed.
absl::StatusOr<std::string> HashLocal(const std::string& path) {
  absl::StatusOr<base::UniqueFd> fd = base::OpenRegularFile(path);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return absl::ErrnoToStatus(errno, "fstat");
  return base::Sha256HexOfFd(fd->get(), static_cast<uint64_t>(st.st_size));
}

CommandResult RunVerifyAttestation(const VerifyAttestationOptions& opt) {
  const std::optional<signing::AttestedVerdict> require =
      signing::ParseAttestedVerdict(opt.require);
  if (!require.has_value()) {
    return UsageError(absl::StrCat("--require-verdict ", TerminalSafe(opt.require),
                                   ": SAFE or SUSPICIOUS"));
  }
  if (!opt.min_rules_version.empty()) {
    if (absl::Status s = app::ParseRulesVersion(opt.min_rules_version).status(); !s.ok()) {
      return UsageError(absl::StrCat("--min-rules-version: ", s.message()));
    }
  }
  absl::StatusOr<signing::PublicKey> pub = signing::PublicKey::LoadFile(opt.key);
  if (!pub.ok()) {
    return UsageError(absl::StrCat("--key ", TerminalSafe(opt.key), ": ", pub.status().message()));
  }
  absl::StatusOr<std::string> bundle = signing::ReadSmallFile(
      opt.bundle, signing::Limits{}.max_bundle_bytes, "Limits::max_bundle_bytes");
  if (!bundle.ok()) {
    return absl::Status(bundle.status().code(),
                        absl::StrCat("verify-attestation: ", bundle.status().message()));
  }
  absl::StatusOr<signing::VerifiedAttestation> verified =
      signing::VerifyAttestation(*bundle, signing::Trust::Key(*std::move(pub)));
  if (!verified.ok()) {
    return absl::Status(verified.status().code(),
                        absl::StrCat("verify-attestation: FAILED: ", TerminalSafe(opt.bundle), ": ",
                                     TerminalSafe(base::StdView(verified.status().message()))));
  }
  const signing::ScanAttestation& a = verified->attestation;
  // The files: named ones, and every file in a named folder (walked as scan walks it).
  std::vector<app::LocalFile> files;
  std::vector<std::string> unreadable;
  for (const app::ScanTarget& t : app::ExpandScanPaths(opt.paths)) {
    if (t.kind == app::ScanTarget::Kind::kSkipped) continue;
    absl::StatusOr<std::string> sha256 = t.kind == app::ScanTarget::Kind::kFile
                                             ? HashLocal(t.path)
                                             : absl::StatusOr<std::string>(t.status);
    if (!sha256.ok()) {
      unreadable.push_back(absl::StrCat(TerminalSafe(t.path), ": cannot be hashed: ",
                                        TerminalSafe(base::StdView(sha256.status().message()))));
      continue;
    }
    files.push_back({t.path, *std::move(sha256)});
  }
  app::AttestationPolicy policy;
  policy.require = *require;
  policy.min_rules_version = opt.min_rules_version;
  app::PolicyOutcome outcome = app::CheckAttestationPolicy(a, files, policy);
  std::string out = absl::StrCat(
      "attestation ", TerminalSafe(opt.bundle), ": signed by ", verified->method, " ",
      TerminalSafe(verified->signer).substr(0, 16), "..., ckptscan ",
      TerminalSafe(a.scanner_version), ", rules ", TerminalSafe(a.rules_version), ", ",
      a.time_created, ", ", a.files.size(), " subjects\n");
  for (const std::string& line : outcome.passed) absl::StrAppend(&out, line, "\n");
  (void)WriteAll(STDOUT_FILENO, out);
  for (const std::string& p : unreadable) PrintError(absl::StrCat("verify-attestation: FAILED: ", p));
  for (const std::string& p : outcome.problems) {
    PrintError(absl::StrCat("verify-attestation: FAILED: ", p));
  }
  if (files.empty() && unreadable.empty()) {
    PrintError("verify-attestation: no file to verify under the given paths");
    return app::kExitError;
  }
  if (!unreadable.empty() && outcome.exit_code == app::kExitSafe) return app::kExitError;
  return outcome.exit_code;
}

}  // namespace

void AddAttestationCommands(CLI::App* app, Commands* out) {
  auto opt = std::make_shared<VerifyAttestationOptions>();
  CLI::App* cmd = app->add_subcommand(
      "verify-attestation",
      "Check local files against a signed scan attestation (scan --attest) and a policy");
  cmd->add_option("PATH", opt->paths,
                  "Files or folders to check (a folder: every file in it, walked as scan walks "
                  "it); each file's SHA-256 must be a subject of the attestation")
      ->required();
  cmd->add_option("--bundle", opt->bundle, "The attestation (a Sigstore bundle from scan --attest)")
      ->type_name("F")
      ->required();
  cmd->add_option("--key", opt->key, "The signer's public key (PEM, from ckptscan keygen)")
      ->type_name("PUB")
      ->required();
  cmd->add_option("--require-verdict", opt->require,
                  "The worst recorded verdict a file may have: SAFE, or SUSPICIOUS (SAFE or "
                  "SUSPICIOUS). DANGEROUS and ERROR never pass")
      ->check(CLI::IsMember({"SAFE", "SUSPICIOUS"}))
      ->capture_default_str();
  cmd->add_option("--min-rules-version", opt->min_rules_version,
                  "Refuse an attestation made with rules older than V (dotted numbers compared "
                  "one by one: 2026.9.1 < 2026.12.0; an overlay's +overlay-sha256-... part is "
                  "not compared)")
      ->type_name("V");
  cmd->footer(
      "Checks, in order: the bundle (strict JSON, Sigstore bundle v0.3, one DSSE signature\n"
      "that verifies with PUB, an in-toto statement with the Simple Verification Result\n"
      "predicate as scan --attest writes it, its records consistent with its subjects), then\n"
      "each file: its SHA-256 (hashed here, never parsed) must be a subject, and the\n"
      "verdict recorded for it (the worst, if several subjects have those bytes) must\n"
      "meet --require-verdict; then --min-rules-version. Every failure is printed, naming\n"
      "the file.\n\n"
      "Exit codes (as for scan):\n"
      "  0   every file is a subject and meets the policy\n"
      "  1   a recorded verdict (SUSPICIOUS, DANGEROUS) or the rules version falls short\n"
      "      of the policy (this wins over 2, as findings do for scan)\n"
      "  2   the attestation does not verify (bad signature, wrong key, malformed,\n"
      "      over a limit), or a file is no subject (changed, never scanned), cannot be\n"
      "      read, or was recorded as ERROR\n"
      "  64  usage error: bad flag, --key or --min-rules-version\n");
  out->push_back({cmd, [opt] { return RunVerifyAttestation(*opt); }});
}

}  // namespace ckptscan::clients
