#include "rules/rules_source.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace ckptscan::rules {
namespace {

absl::Status Prefixed(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

std::string RulesSource::Describe() const {
  std::string out = rules_file.empty() ? "built-in" : rules_file;
  if (!overlay_file.empty()) absl::StrAppend(&out, " + overlay ", overlay_file);
  if (!allow.empty()) absl::StrAppend(&out, " + ", allow.size(), " --allow");
  return out;
}

std::string CanonicalBytes(const v1::RuleSet& rules) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    rules.SerializeToCodedStream(&coded);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(const RulesSource& source) {
  std::shared_ptr<const rules::RuleSet> base;
  if (source.rules_file.empty()) {
    base = rules::RuleSet::Default();
  } else {
    absl::StatusOr<std::shared_ptr<const rules::RuleSet>> loaded =
        rules::RuleSet::FromFile(source.rules_file);
    if (!loaded.ok()) return Prefixed(loaded.status(), "--rules: ");
    base = *std::move(loaded);
  }
  if (!source.has_overlay()) return base;

  v1::RuleSet overlay;
  std::string origin;
  if (!source.overlay_file.empty()) {
    absl::StatusOr<v1::RuleSet> read = rules::RuleSet::ReadOverlayFile(source.overlay_file);
    if (!read.ok()) return Prefixed(read.status(), "--rules-overlay: ");
    overlay = *std::move(read);
    origin = source.overlay_file;
  }
  // The same --allow given twice (as when the hints of two findings are pasted together) is
  // one entry; the overlay file's own entries still may not repeat.
  absl::flat_hash_set<std::pair<std::string, std::string>> flagged;
  for (const std::string& name : source.allow) {
    absl::StatusOr<v1::AllowedGlobal> entry = rules::RuleSet::TrustedName(name);
    if (!entry.ok()) return entry.status();
    if (!flagged.emplace(entry->module(), entry->name()).second) continue;
    *overlay.add_allow() = *std::move(entry);
  }
  if (!source.allow.empty()) {
    absl::StrAppend(&origin, origin.empty() ? "" : " and ", "--allow");
  }
  absl::StatusOr<std::string> digest = base::Sha256Hex(CanonicalBytes(overlay));
  if (!digest.ok()) return digest.status();
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> merged =
      rules::RuleSet::WithOverlay(*base, overlay, *digest, origin);
  // The error names its origin ("rules --allow: allow[0] (os.system): ..."; entries from the
  // file come first, then one per --allow in order).
  if (!merged.ok() && !source.overlay_file.empty()) {
    return Prefixed(merged.status(), "--rules-overlay: ");
  }
  return merged;
}

}  // namespace ckptscan::rules
