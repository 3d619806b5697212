#include "signing/attestation.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "signing/encoding.h"
#include "signing/statement.h"
#include "signing/strict_json.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

constexpr std::string_view kDoc = "attestation";
// The time format we write and accept: RFC 3339 in UTC to the second (in-toto's Timestamp).
constexpr char kTimeFormat[] = "%Y-%m-%d%ET%H:%M:%SZ";
// Limit names are --limit names: short, [a-z0-9_].
constexpr size_t kMaxLimitNameBytes = 64;

constexpr std::string_view kVerdictNames[] = {"SAFE", "SUSPICIOUS", "DANGEROUS", "ERROR"};

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

absl::Status Invalid(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(AbslView(kDoc), ": ", AbslView(path), " ", AbslView(what)));
}

absl::Status OverLimit(std::string_view path, size_t n, std::string_view field, size_t limit) {
  return base::LimitError(absl::StrFormat("%s: %s has %d entries, over Limits::%s (%d)",
                                          AbslView(kDoc), AbslView(path), n, AbslView(field),
                                          limit),
                          field, limit);
}

// A name we write or read: not empty, valid UTF-8 (JSON can hold nothing else), bounded.
absl::Status CheckText(std::string_view path, std::string_view s, const Limits& limits,
                       bool allow_empty) {
  if (s.empty() && !allow_empty) return Invalid(path, "is empty");
  if (s.size() > limits.max_name_bytes) {
    return base::LimitError(absl::StrFormat("%s: %s is %d bytes, over Limits::max_name_bytes (%d)",
                                            AbslView(kDoc), AbslView(path), s.size(),
                                            limits.max_name_bytes),
                            "max_name_bytes", limits.max_name_bytes);
  }
  if (!IsValidUtf8(s)) return Invalid(path, "is not valid UTF-8");
  return absl::OkStatus();
}

bool IsLimitName(std::string_view s) {
  if (s.empty() || s.size() > kMaxLimitNameBytes) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

absl::Status CheckTime(std::string_view path, std::string_view s) {
  absl::Time t;
  std::string err;
  if (s.size() != 20 || !absl::ParseTime(kTimeFormat, std::string(s), &t, &err) ||
      absl::FormatTime(kTimeFormat, t, absl::UTCTimeZone()) != s) {
    return Invalid(path, absl::StrCat("is not an RFC 3339 UTC time to the second "
                                      "(YYYY-MM-DDTHH:MM:SSZ): ",
                                      Esc(Quoted(s.substr(0, 64)))));
  }
  return absl::OkStatus();
}

// The agreements between one file's fields that make its record honest: an ERROR file or one
// with errors was not read whole, and a SAFE verdict needs a whole reading.
absl::Status CheckFileCoherent(std::string_view path, const AttestedFile& f) {
  if (f.complete && !f.errors.empty()) {
    return Invalid(path, "is complete but lists errors");
  }
  if (f.complete && f.kind.empty()) {
    return Invalid(path, "is complete but has no kind (a complete reading names one)");
  }
  if (f.verdict == AttestedVerdict::kError && f.complete) {
    return Invalid(path, "has verdict ERROR but claims a complete reading");
  }
  if (f.verdict == AttestedVerdict::kSafe && !f.complete) {
    return Invalid(path, "has verdict SAFE but its reading did not complete");
  }
  return absl::OkStatus();
}

absl::Status CheckList(std::string_view path, const std::vector<std::string>& list,
                       const Limits& limits) {
  if (list.size() > limits.max_attested_list_entries) {
    return OverLimit(path, list.size(), "max_attested_list_entries",
                     limits.max_attested_list_entries);
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (absl::Status s = CheckText(absl::StrFormat("%s[%d]", AbslView(path), i), list[i], limits,
                                   /*allow_empty=*/false);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Every check ParseAttestation makes on the values, shared with WriteAttestation so that we
// never sign what we would refuse.
absl::Status Validate(const ScanAttestation& a, const Limits& limits) {
  if (absl::Status s = CheckText("predicate.verifier.ckptscanVersion", a.scanner_version, limits,
                                 false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckText("predicate.verifier.ckptscanRules.version", a.rules_version, limits, false);
      !s.ok()) {
    return s;
  }
  if (!IsSha256Hex(a.rules_sha256)) {
    return Invalid("predicate.verifier.ckptscanRules.digest.sha256",
                   "is not 64 lowercase hex digits");
  }
  if (a.limits.size() > limits.max_attested_list_entries) {
    return OverLimit("predicate.verifier.ckptscanLimits", a.limits.size(),
                     "max_attested_list_entries", limits.max_attested_list_entries);
  }
  std::set<std::string_view> limit_names;
  for (const LimitValue& l : a.limits) {
    if (!IsLimitName(l.name)) {
      return Invalid("predicate.verifier.ckptscanLimits",
                     absl::StrCat("has a key that is no limit name: ", Esc(Quoted(l.name))));
    }
    if (!limit_names.insert(l.name).second) {
      return Invalid("predicate.verifier.ckptscanLimits",
                     absl::StrCat("names ", l.name, " twice"));
    }
  }
  if (absl::Status s = CheckTime("predicate.timeCreated", a.time_created); !s.ok()) return s;
  if (a.files.empty()) return Invalid("subject", "is empty: nothing was attested");
  if (a.files.size() > limits.max_attested_files) {
    return OverLimit("subject", a.files.size(), "max_attested_files", limits.max_attested_files);
  }
  std::set<std::string_view> names;
  for (size_t i = 0; i < a.files.size(); ++i) {
    const AttestedFile& f = a.files[i];
    const std::string path = absl::StrFormat("subject[%d]", i);
    if (absl::Status s = CheckText(path + ".name", f.name, limits, false); !s.ok()) return s;
    if (!names.insert(f.name).second) {
      return Invalid(path + ".name", absl::StrCat(Esc(Quoted(f.name)), " names another subject "
                                                                       "too (subject names are "
                                                                       "unique)"));
    }
    if (!IsSha256Hex(f.sha256)) {
      return Invalid(path + ".digest.sha256",
                     absl::StrCat("is not 64 lowercase hex digits: ",
                                  Esc(Quoted(std::string_view(f.sha256).substr(0, 80)))));
    }
    const std::string fp = absl::StrFormat("predicate.ckptscanFiles[%d]", i);
    if (absl::Status s = CheckText(fp + ".format", f.format, limits, true); !s.ok()) return s;
    if (absl::Status s = CheckText(fp + ".kind", f.kind, limits, true); !s.ok()) return s;
    for (const auto& [field, list] :
         {std::pair{".shards", &f.shards}, std::pair{".codeFiles", &f.code_files},
          std::pair{".ruleIds", &f.rule_ids}, std::pair{".errors", &f.errors}}) {
      if (absl::Status s = CheckList(fp + field, *list, limits); !s.ok()) return s;
    }
    if (absl::Status s = CheckFileCoherent(fp, f); !s.ok()) return s;
  }
  return absl::OkStatus();
}

Json StringArray(const std::vector<std::string>& list) {
  Json a = Json::array();
  for (const std::string& s : list) a.push_back(s);
  return a;
}

// Readers for the predicate's fields; each error names the field's path.
absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key, std::string_view path) {
  absl::StatusOr<const std::string*> s = RequiredString(obj, key, kDoc, path);
  if (!s.ok()) return s.status();
  return **s;
}

absl::StatusOr<uint64_t> GetCount(const Json& obj, std::string_view key, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return MissingField(kDoc, path);
  if (!v->is_number_unsigned()) return WrongType(kDoc, path, "a non-negative integer", *v);
  return v->get<uint64_t>();
}

absl::StatusOr<std::vector<std::string>> GetStrings(const Json& obj, std::string_view key,
                                                    std::string_view path, const Limits& limits) {
  absl::StatusOr<const Json*> a = RequiredArray(obj, key, kDoc, path);
  if (!a.ok()) return a.status();
  if ((*a)->size() > limits.max_attested_list_entries) {
    return OverLimit(path, (*a)->size(), "max_attested_list_entries",
                     limits.max_attested_list_entries);
  }
  std::vector<std::string> out;
  out.reserve((*a)->size());
  for (size_t i = 0; i < (*a)->size(); ++i) {
    const Json& v = (**a)[i];
    if (!v.is_string()) {
      return WrongType(kDoc, absl::StrFormat("%s[%d]", AbslView(path), i), "a string", v);
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

// Our extension objects are ours to define: a field we do not know there is an error, so that
// nothing in them is silently dropped.
absl::Status OnlyKnownFields(const Json& obj, std::string_view path,
                             std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) return Invalid(path, absl::StrCat("has an unknown field ", Esc(Quoted(it.key()))));
  }
  return absl::OkStatus();
}

// {"sha256": HEX} and nothing else: we write only SHA-256, and a second algorithm could
// disagree with it.
absl::StatusOr<std::string> GetSha256Digest(const Json& obj, std::string_view path) {
  absl::StatusOr<const Json*> d = RequiredObject(obj, "digest", kDoc, path);
  if (!d.ok()) return d.status();
  if (absl::Status s = OnlyKnownFields(**d, path, {"sha256"}); !s.ok()) return s;
  absl::StatusOr<std::string> hex = GetString(**d, "sha256", absl::StrCat(AbslView(path), ".sha256"));
  if (!hex.ok()) return hex.status();
  return hex;
}

absl::StatusOr<AttestedFile> ParseFile(const Json& entry, std::string_view path,
                                       const Limits& limits) {
  if (!entry.is_object()) return WrongType(kDoc, path, "an object", entry);
  if (absl::Status s = OnlyKnownFields(entry, path,
                                       {"name", "verdict", "format", "kind", "complete", "pickles",
                                        "globals", "tensors", "shards", "codeFiles", "ruleIds",
                                        "errors"});
      !s.ok()) {
    return s;
  }
  AttestedFile f;
  const std::string p(path);
  CKPT_ASSIGN_OR_RETURN(f.name, GetString(entry, "name", p + ".name"));
  CKPT_ASSIGN_OR_RETURN(const std::string verdict, GetString(entry, "verdict", p + ".verdict"));
  std::optional<AttestedVerdict> v = ParseAttestedVerdict(verdict);
  if (!v.has_value()) {
    return Invalid(p + ".verdict", absl::StrCat("is not SAFE, SUSPICIOUS, DANGEROUS or ERROR: ",
                                                Esc(Quoted(verdict.substr(0, 64)))));
  }
  f.verdict = *v;
  CKPT_ASSIGN_OR_RETURN(f.format, GetString(entry, "format", p + ".format"));
  CKPT_ASSIGN_OR_RETURN(f.kind, GetString(entry, "kind", p + ".kind"));
  const Json* complete = FindField(entry, "complete");
  if (complete == nullptr) return MissingField(kDoc, p + ".complete");
  if (!complete->is_boolean()) return WrongType(kDoc, p + ".complete", "a boolean", *complete);
  f.complete = complete->get<bool>();
  CKPT_ASSIGN_OR_RETURN(f.pickles, GetCount(entry, "pickles", p + ".pickles"));
  CKPT_ASSIGN_OR_RETURN(f.globals, GetCount(entry, "globals", p + ".globals"));
  CKPT_ASSIGN_OR_RETURN(f.tensors, GetCount(entry, "tensors", p + ".tensors"));
  CKPT_ASSIGN_OR_RETURN(f.shards, GetStrings(entry, "shards", p + ".shards", limits));
  CKPT_ASSIGN_OR_RETURN(f.code_files, GetStrings(entry, "codeFiles", p + ".codeFiles", limits));
  CKPT_ASSIGN_OR_RETURN(f.rule_ids, GetStrings(entry, "ruleIds", p + ".ruleIds", limits));
  CKPT_ASSIGN_OR_RETURN(f.errors, GetStrings(entry, "errors", p + ".errors", limits));
  return f;
}

absl::Status ParseVerifier(const Json& predicate, ScanAttestation* a, const Limits& limits) {
  CKPT_ASSIGN_OR_RETURN(const Json* verifier,
                        RequiredObject(predicate, "verifier", kDoc, "predicate.verifier"));
  CKPT_ASSIGN_OR_RETURN(const std::string id, GetString(*verifier, "id", "predicate.verifier.id"));
  CKPT_ASSIGN_OR_RETURN(a->scanner_version, GetString(*verifier, "ckptscanVersion",
                                                      "predicate.verifier.ckptscanVersion"));
  if (id != absl::StrCat(AbslView(kVerifierIdPrefix), a->scanner_version)) {
    return Invalid("predicate.verifier.id",
                   absl::StrCat(Esc(Quoted(std::string_view(id).substr(0, 200))),
                                " is not the id of ckptscan ", Esc(a->scanner_version.substr(0, 64)),
                                " (verifier.ckptscanVersion): expected ",
                                Quoted(kVerifierIdPrefix), " followed by the version"));
  }
  CKPT_ASSIGN_OR_RETURN(const Json* rules, RequiredObject(*verifier, "ckptscanRules", kDoc,
                                                          "predicate.verifier.ckptscanRules"));
  if (absl::Status s =
          OnlyKnownFields(*rules, "predicate.verifier.ckptscanRules", {"version", "digest"});
      !s.ok()) {
    return s;
  }
  CKPT_ASSIGN_OR_RETURN(a->rules_version,
                        GetString(*rules, "version", "predicate.verifier.ckptscanRules.version"));
  CKPT_ASSIGN_OR_RETURN(a->rules_sha256,
                        GetSha256Digest(*rules, "predicate.verifier.ckptscanRules.digest"));
  CKPT_ASSIGN_OR_RETURN(const Json* lim, RequiredObject(*verifier, "ckptscanLimits", kDoc,
                                                        "predicate.verifier.ckptscanLimits"));
  if (lim->size() > limits.max_attested_list_entries) {
    return OverLimit("predicate.verifier.ckptscanLimits", lim->size(),
                     "max_attested_list_entries", limits.max_attested_list_entries);
  }
  for (auto it = lim->begin(); it != lim->end(); ++it) {
    const std::string path = absl::StrCat("predicate.verifier.ckptscanLimits.", Esc(it.key()));
    if (!it.value().is_number_unsigned()) {
      return WrongType(kDoc, path, "a non-negative integer", it.value());
    }
    a->limits.push_back({it.key(), it.value().get<uint64_t>()});
  }
  return absl::OkStatus();
}

absl::StatusOr<ScanAttestation> ParseDocument(const Json& doc, const Limits& limits) {
  if (!doc.is_object()) return WrongType(kDoc, "the statement", "an object", doc);
  CKPT_ASSIGN_OR_RETURN(const std::string type, GetString(doc, "_type", "_type"));
  if (type != kStatementType) {
    return Invalid("_type", absl::StrCat(Esc(Quoted(std::string_view(type).substr(0, 200))),
                                         " is not ", Quoted(kStatementType)));
  }
  CKPT_ASSIGN_OR_RETURN(const std::string ptype, GetString(doc, "predicateType", "predicateType"));
  if (ptype != kSvrPredicateType) {
    return Invalid("predicateType",
                   absl::StrCat(Esc(Quoted(std::string_view(ptype).substr(0, 200))),
                                " is not a scan attestation's ", Quoted(kSvrPredicateType)));
  }
  CKPT_ASSIGN_OR_RETURN(const Json* subjects, RequiredArray(doc, "subject", kDoc, "subject"));
  if (subjects->size() > limits.max_attested_files) {
    return OverLimit("subject", subjects->size(), "max_attested_files", limits.max_attested_files);
  }
  ScanAttestation a;
  a.files.resize(subjects->size());
  for (size_t i = 0; i < subjects->size(); ++i) {
    const Json& s = (*subjects)[i];
    const std::string path = absl::StrFormat("subject[%d]", i);
    if (!s.is_object()) return WrongType(kDoc, path, "an object", s);
    CKPT_ASSIGN_OR_RETURN(a.files[i].name, GetString(s, "name", path + ".name"));
    CKPT_ASSIGN_OR_RETURN(a.files[i].sha256, GetSha256Digest(s, path + ".digest"));
  }
  CKPT_ASSIGN_OR_RETURN(const Json* predicate,
                        RequiredObject(doc, "predicate", kDoc, "predicate"));
  if (absl::Status s = ParseVerifier(*predicate, &a, limits); !s.ok()) return s;
  CKPT_ASSIGN_OR_RETURN(a.time_created,
                        GetString(*predicate, "timeCreated", "predicate.timeCreated"));
  CKPT_ASSIGN_OR_RETURN(const std::vector<std::string> properties,
                        GetStrings(*predicate, "properties", "predicate.properties", limits));
  CKPT_ASSIGN_OR_RETURN(const Json* files, RequiredArray(*predicate, "ckptscanFiles", kDoc,
                                                         "predicate.ckptscanFiles"));
  if (files->size() != a.files.size()) {
    return Invalid("predicate.ckptscanFiles",
                   absl::StrFormat("has %d entries for %d subjects (one per subject, in order)",
                                   files->size(), a.files.size()));
  }
  for (size_t i = 0; i < files->size(); ++i) {
    const std::string path = absl::StrFormat("predicate.ckptscanFiles[%d]", i);
    CKPT_ASSIGN_OR_RETURN(AttestedFile f, ParseFile((*files)[i], path, limits));
    if (f.name != a.files[i].name) {
      return Invalid(path + ".name",
                     absl::StrCat(Esc(Quoted(std::string_view(f.name).substr(0, 200))),
                                  " is not subject[", i, "]'s name ",
                                  Esc(Quoted(std::string_view(a.files[i].name).substr(0, 200)))));
    }
    f.sha256 = std::move(a.files[i].sha256);
    a.files[i] = std::move(f);
  }
  if (absl::Status s = Validate(a, limits); !s.ok()) return s;
  if (properties != PropertiesOf(a.files)) {
    std::string expected;
    for (const std::string& p : PropertiesOf(a.files)) {
      absl::StrAppend(&expected, expected.empty() ? "" : ", ", p);
    }
    return Invalid("predicate.properties",
                   absl::StrCat("do not match the files (they support exactly [", expected, "])"));
  }
  return a;
}

}  // namespace

std::string_view AttestedVerdictName(AttestedVerdict v) {
  return kVerdictNames[static_cast<int>(v)];
}

std::optional<AttestedVerdict> ParseAttestedVerdict(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (kVerdictNames[i] == name) return static_cast<AttestedVerdict>(i);
  }
  return std::nullopt;
}

std::vector<std::string> PropertiesOf(const std::vector<AttestedFile>& files) {
  bool complete = !files.empty(), not_dangerous = !files.empty(), safe = !files.empty();
  for (const AttestedFile& f : files) {
    complete = complete && f.complete;
    not_dangerous = not_dangerous && (f.verdict == AttestedVerdict::kSafe ||
                                      f.verdict == AttestedVerdict::kSuspicious);
    safe = safe && f.verdict == AttestedVerdict::kSafe;
  }
  std::vector<std::string> out;
  if (complete) out.emplace_back(kPropertyReadComplete);
  if (not_dangerous) out.emplace_back(kPropertyNotDangerous);
  if (safe) out.emplace_back(kPropertyVerdictSafe);
  return out;
}

absl::StatusOr<std::string> WriteAttestation(const ScanAttestation& a, const Limits& limits) {
  if (absl::Status s = Validate(a, limits); !s.ok()) return s;
  Json subjects = Json::array();
  Json files = Json::array();
  for (const AttestedFile& f : a.files) {
    subjects.push_back({{"name", f.name}, {"digest", {{"sha256", f.sha256}}}});
    files.push_back({{"name", f.name},
                     {"verdict", AttestedVerdictName(f.verdict)},
                     {"format", f.format},
                     {"kind", f.kind},
                     {"complete", f.complete},
                     {"pickles", f.pickles},
                     {"globals", f.globals},
                     {"tensors", f.tensors},
                     {"shards", StringArray(f.shards)},
                     {"codeFiles", StringArray(f.code_files)},
                     {"ruleIds", StringArray(f.rule_ids)},
                     {"errors", StringArray(f.errors)}});
  }
  Json limit_values = Json::object();
  for (const LimitValue& l : a.limits) limit_values[l.name] = l.value;
  Json verifier = {
      {"id", absl::StrCat(AbslView(kVerifierIdPrefix), a.scanner_version)},
      {"ckptscanVersion", a.scanner_version},
      {"ckptscanRules", {{"version", a.rules_version}, {"digest", {{"sha256", a.rules_sha256}}}}},
      {"ckptscanLimits", std::move(limit_values)},
  };
  Json statement = {
      {"_type", kStatementType},
      {"subject", std::move(subjects)},
      {"predicateType", kSvrPredicateType},
      {"predicate",
       {{"verifier", std::move(verifier)},
        {"timeCreated", a.time_created},
        {"properties", StringArray(PropertiesOf(a.files))},
        {"ckptscanFiles", std::move(files)}}},
  };
  // Every string was checked to be valid UTF-8 (Validate), so dump cannot throw.
  std::string payload = statement.dump(2);
  if (payload.size() > limits.max_payload_bytes) {
    return base::LimitError(
        absl::StrFormat("%s: the statement is %d bytes, over Limits::max_payload_bytes (%d)",
                        AbslView(kDoc), payload.size(), limits.max_payload_bytes),
        "max_payload_bytes", limits.max_payload_bytes);
  }
  if (absl::StatusOr<ScanAttestation> back = ParseAttestation(payload, limits); !back.ok()) {
    return absl::InternalError(
        absl::StrCat("the attestation we wrote does not read back: ", back.status().message()));
  }
  return payload;
}

absl::StatusOr<ScanAttestation> ParseAttestation(std::string_view payload, const Limits& limits) {
  if (payload.size() > limits.max_payload_bytes) {
    return base::LimitError(
        absl::StrFormat("%s: the statement is %d bytes, over Limits::max_payload_bytes (%d)",
                        AbslView(kDoc), payload.size(), limits.max_payload_bytes),
        "max_payload_bytes", limits.max_payload_bytes);
  }
  absl::StatusOr<Json> doc = ParseStrictJson(payload, kDoc, limits);
  if (!doc.ok()) return doc.status();
  return ParseDocument(*doc, limits);
}

absl::StatusOr<std::string> SignAttestation(const ScanAttestation& attestation,
                                            const PrivateKey& key, const Limits& limits) {
  absl::StatusOr<std::string> payload = WriteAttestation(attestation, limits);
  if (!payload.ok()) return payload.status();
  return SignPayload(*payload, key);
}

absl::StatusOr<VerifiedAttestation> VerifyAttestation(std::string_view bundle_json,
                                                      const Trust& trust, const Limits& limits) {
  absl::StatusOr<SignedPayload> signed_payload = VerifyEnvelope(bundle_json, trust, limits);
  if (!signed_payload.ok()) return signed_payload.status();
  absl::StatusOr<ScanAttestation> a = ParseAttestation(signed_payload->payload, limits);
  if (!a.ok()) return a.status();
  return VerifiedAttestation{*std::move(a), std::move(signed_payload->method),
                             std::move(signed_payload->signer)};
}

}  // namespace ckptscan::signing
