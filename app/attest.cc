#include "app/attest.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "app/report_format.h"
#include "app/verdict.h"
#include "base/sha256.h"
#include "base/strings.h"
#include "rules/rules_source.h"

namespace ckptscan::app {
namespace {

using signing::AttestedFile;
using signing::AttestedVerdict;

constexpr size_t kMaxVersionParts = 8;
constexpr size_t kMaxVersionPartDigits = 18;  // fits uint64_t

AttestedVerdict AttestedVerdictOf(v1::Verdict v) {
  switch (v) {
    case v1::VERDICT_SAFE:
      return AttestedVerdict::kSafe;
    case v1::VERDICT_SUSPICIOUS:
      return AttestedVerdict::kSuspicious;
    case v1::VERDICT_DANGEROUS:
      return AttestedVerdict::kDangerous;
    default:  // ERROR, and anything unjudged: never better than ERROR
      return AttestedVerdict::kError;
  }
}

// The directory a command-line PATH roots its files at: itself when it is a folder ("models/"
// and "models" alike), else its directory ("" for a bare file name).
std::string RootOf(std::string_view scan_path, bool is_dir) {
  std::string p(scan_path);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (is_dir) return p;
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// `path` relative to `root`, if it lies beneath it.
std::optional<std::string> Beneath(std::string_view path, std::string_view root) {
  if (root.empty()) {
    if (path.empty() || path[0] == '/') return std::nullopt;
    return std::string(path);
  }
  const std::string prefix = root == "/" ? "/" : absl::StrCat(base::AbslView(root), "/");
  if (!absl::StartsWith(base::AbslView(path), prefix) || path.size() == prefix.size()) {
    return std::nullopt;
  }
  return std::string(path.substr(prefix.size()));
}

AttestedFile FileOf(const v1::FileReport& f, std::string name) {
  AttestedFile out;
  out.name = std::move(name);
  out.sha256 = f.sha256();
  out.verdict = AttestedVerdictOf(f.verdict());
  out.format = f.format();
  out.kind = f.kind();
  // A reading that completed named a kind and met no error; an ERROR verdict never did.
  out.complete =
      out.verdict != AttestedVerdict::kError && f.errors_size() == 0 && !f.kind().empty();
  out.pickles = f.pickles();
  out.globals = f.globals();
  out.tensors = f.tensors().count();
  out.shards.assign(f.shards().begin(), f.shards().end());
  for (const v1::CodeFile& c : f.code_files()) out.code_files.push_back(c.name());
  std::set<std::string> ids;
  for (const v1::Finding& finding : f.findings()) ids.insert(finding.rule_id());
  out.rule_ids.assign(ids.begin(), ids.end());
  for (const v1::ScanError& e : f.errors()) {
    std::string code = ErrorCodeName(e.code());
    if (!e.limit_name().empty()) absl::StrAppend(&code, ":", e.limit_name());
    out.errors.push_back(std::move(code));
  }
  return out;
}

}  // namespace

namespace {

// The roots the command line's PATHs name their files under, longest first: a folder given
// inside another given folder names its own files. One stat per PATH.
std::vector<std::string> SubjectRoots(const std::vector<std::string>& scan_paths) {
  std::vector<std::string> roots;
  for (const std::string& p : scan_paths) {
    struct stat st;
    const bool is_dir = ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    roots.push_back(RootOf(p, is_dir));
  }
  std::sort(roots.begin(), roots.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return roots;
}

std::string SubjectNameUnder(const std::string& path, const std::vector<std::string>& roots) {
  for (const std::string& root : roots) {
    if (std::optional<std::string> rel = Beneath(path, root); rel.has_value()) return *rel;
  }
  return path;
}

}  // namespace

std::string SubjectName(const std::string& path, const std::vector<std::string>& scan_paths) {
  return SubjectNameUnder(path, SubjectRoots(scan_paths));
}

absl::StatusOr<std::string> RulesDigest(const v1::RuleSet& rules) {
  return base::Sha256Hex(rules::CanonicalBytes(rules));
}

absl::StatusOr<signing::ScanAttestation> AttestationOf(const v1::Report& report,
                                                       const AttestContext& context) {
  if (report.files_size() == 0) {
    return absl::FailedPreconditionError("no file was scanned: there is nothing to attest");
  }
  signing::ScanAttestation a;
  a.scanner_version = report.scanner_version();
  a.rules_version = report.rules_version();
  a.rules_sha256 = context.rules_sha256;
  a.limits = context.limits;
  a.time_created = absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", context.time, absl::UTCTimeZone());
  std::map<std::string, std::string> names;  // subject name -> report path
  const std::vector<std::string> roots = SubjectRoots(context.scan_paths);
  for (const v1::FileReport& f : report.files()) {
    if (f.sha256().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          TerminalSafe(f.path()), ": no SHA-256 was computed, so it cannot be attested"));
    }
    std::string name = SubjectNameUnder(f.path(), roots);
    if (auto [it, inserted] = names.emplace(name, f.path()); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          TerminalSafe(f.path()), " and ", TerminalSafe(it->second),
          " would both be attested as ", TerminalSafe(name),
          ": scan them under one folder, or separately"));
    }
    a.files.push_back(FileOf(f, std::move(name)));
  }
  return a;
}

absl::StatusOr<std::vector<uint64_t>> ParseRulesVersion(std::string_view version) {
  const std::string_view numbers = version.substr(0, version.find('+'));
  std::vector<uint64_t> parts;
  for (absl::string_view part : absl::StrSplit(base::AbslView(numbers), '.')) {
    uint64_t n = 0;
    const bool digits =
        !part.empty() && part.size() <= kMaxVersionPartDigits &&
        std::all_of(part.begin(), part.end(), [](char c) { return absl::ascii_isdigit(c); });
    if (!digits || !absl::SimpleAtoi(part, &n) || parts.size() == kMaxVersionParts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rules version ", TerminalSafe(std::string(version.substr(0, 100))),
          " is not dotted decimal numbers (YYYY.MM.N, optionally +overlay-...)"));
    }
    parts.push_back(n);
  }
  return parts;
}

int CompareRulesVersions(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const uint64_t x = i < a.size() ? a[i] : 0;
    const uint64_t y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

PolicyOutcome CheckAttestationPolicy(const signing::ScanAttestation& attestation,
                                     const std::vector<LocalFile>& files,
                                     const AttestationPolicy& policy) {
  PolicyOutcome out;
  bool short_of_policy = false;  // exit 1
  bool not_verified = false;     // exit 2
  if (!policy.min_rules_version.empty()) {
    absl::StatusOr<std::vector<uint64_t>> min = ParseRulesVersion(policy.min_rules_version);
    absl::StatusOr<std::vector<uint64_t>> got = ParseRulesVersion(attestation.rules_version);
    if (!got.ok()) {
      short_of_policy = true;
      out.problems.push_back(absl::StrCat("the attestation's ", got.status().message(),
                                          ", so it cannot be compared with --min-rules-version ",
                                          TerminalSafe(policy.min_rules_version)));
    } else if (min.ok() && CompareRulesVersions(*got, *min) < 0) {
      short_of_policy = true;
      out.problems.push_back(absl::StrCat(
          "the files were judged by rules ", TerminalSafe(attestation.rules_version),
          ", older than --min-rules-version ", TerminalSafe(policy.min_rules_version)));
    }
  }
  // Per digest, the worst subject with it: one pass, then one lookup per local file.
  absl::flat_hash_map<std::string_view, const AttestedFile*> by_digest;
  for (const AttestedFile& f : attestation.files) {
    const AttestedFile*& worst = by_digest[f.sha256];
    if (worst == nullptr || f.verdict > worst->verdict) worst = &f;
  }
  for (const LocalFile& local : files) {
    const auto it = by_digest.find(local.sha256);
    const AttestedFile* worst = it == by_digest.end() ? nullptr : it->second;
    const std::string shown = TerminalSafe(local.path);
    if (worst == nullptr) {
      not_verified = true;
      out.problems.push_back(absl::StrCat(shown, ": its SHA-256 ", local.sha256,
                                          " is no subject of the attestation (changed, or "
                                          "never scanned)"));
      continue;
    }
    const std::string verdict(signing::AttestedVerdictName(worst->verdict));
    if (worst->verdict <= policy.require) {
      out.passed.push_back(absl::StrCat(shown, ": ", verdict, " as ", TerminalSafe(worst->name)));
      continue;
    }
    if (worst->verdict == AttestedVerdict::kError) {
      not_verified = true;
    } else {
      short_of_policy = true;
    }
    std::string why;
    if (!worst->rule_ids.empty()) {
      why = absl::StrCat(" (rules ", TerminalSafe(absl::StrJoin(worst->rule_ids, ", ")), ")");
    } else if (!worst->errors.empty()) {
      why = absl::StrCat(" (errors ", TerminalSafe(absl::StrJoin(worst->errors, ", ")), ")");
    }
    out.problems.push_back(absl::StrCat(
        shown, ": recorded as ", verdict, why, " as ", TerminalSafe(worst->name),
        "; the policy requires ", base::AbslView(signing::AttestedVerdictName(policy.require)),
        policy.require == AttestedVerdict::kSafe ? "" : " or better"));
  }
  out.exit_code = short_of_policy ? kExitFindings : not_verified ? kExitError : kExitSafe;
  return out;
}

}  // namespace ckptscan::app
