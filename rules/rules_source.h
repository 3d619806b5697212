// Where the rules in force come from: the built-in rules or a --rules file, plus an optional
// local overlay (--rules-overlay FILE and --allow NAME, repeatable). The CLI and the daemon load
// them the same way, and the daemon again on every reload.
//
//   RulesSource source{.rules_file = "", .overlay_file = "site.textproto", .allow = {"a.B"}};
//   CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const rules::RuleSet> rules, LoadRules(source));
#ifndef CKPTSCAN_RULES_RULES_SOURCE_H_
#define CKPTSCAN_RULES_RULES_SOURCE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {

struct RulesSource {
  std::string rules_file;          // empty: the built-in rules
  std::string overlay_file;        // empty: no overlay file
  std::vector<std::string> allow;  // --allow NAME, in order

  bool has_overlay() const { return !overlay_file.empty() || !allow.empty(); }
  // "built-in", "FILE", "built-in + overlay FILE + 2 --allow": for logs.
  std::string Describe() const;
};

// `rules` as a deterministically serialized binary ckptscan.v1.RuleSet: what the overlay's
// digest in a rules version, and a scan attestation's rules digest, are computed over.
std::string CanonicalBytes(const v1::RuleSet& rules);

// The rules of `source`. With an overlay, its entries (the file's, then one per --allow, see
// rules::RuleSet::TrustedName) are merged with RuleSet::WithOverlay, and the version names the
// SHA-256 of the overlay as a deterministically serialized binary ckptscan.v1.RuleSet. Errors
// name the flag and the entry ("--rules-overlay site.textproto: allow[0] (os.system): ...");
// nothing partial is ever returned.
absl::StatusOr<std::shared_ptr<const rules::RuleSet>> LoadRules(const RulesSource& source);

}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_RULES_SOURCE_H_
