// Private to rules/: the compiled form of a RuleSet (RuleSet::Impl: the parsed proto and the
// indexes over it) and the helpers that the files loading, validating, compiling and evaluating
// rules share:
//   rule_set.cc       the public factories: read a rules file, parse text or binary, Default();
//   rule_validate.cc  the checks of a parsed RuleSet that need no index (entries, shapes, specs);
//   rule_compile.cc   RuleSet::Compile, which builds the indexes below, and the deny lookup;
//   rule_evaluate.cc  RuleSet::Evaluate: facts -> findings and a verdict;
//   rule_overlay.cc   RuleSet::WithOverlay (a local allowlist merged onto the rules) and
//                     the entry an --allow NAME makes.
#ifndef CKPTSCAN_RULES_RULE_SET_INTERNAL_H_
#define CKPTSCAN_RULES_RULE_SET_INTERNAL_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ckptscan/v1/rules.pb.h"
#include "google/protobuf/message.h"
#include "rules/rule_set.h"

namespace ckptscan::rules {

struct RuleSet::Impl {
  struct DenyRef {
    const v1::DenyEntry* entry = nullptr;
    int index = -1;  // position in the file: the deterministic last tie-break
  };
  // The best deny entry for a global, and what it matched ("os.system", "os.*", "*.eval").
  struct DenyMatch {
    DenyRef ref;
    int specificity = 0;
    std::string matched;
    explicit operator bool() const { return ref.entry != nullptr; }
  };
  template <typename V>
  using ByName = absl::flat_hash_map<std::string, V>;

  v1::RuleSet proto;
  ByName<ByName<const v1::AllowedGlobal*>> allow;
  ByName<ByName<DenyRef>> deny_exact;  // module -> qualname -> entry
  ByName<DenyRef> deny_module;         // name "*": the module, its names and submodules
  ByName<DenyRef> deny_bare;           // module "*": a qualname component in any module
  size_t exact_module_parts = 0;       // most components in an exact entry's module
  size_t exact_name_parts = 0;         // most components in an exact entry's qualname
  size_t star_module_parts = 0;        // most components in a "*" entry's module

  class Run;

  const v1::AllowedGlobal* FindAllow(absl::string_view module, absl::string_view name) const {
    auto m = allow.find(module);
    if (m == allow.end()) return nullptr;
    auto n = m->second.find(name);
    return n == m->second.end() ? nullptr : n->second;
  }

  // Dangerous entries first (a mild exact entry never hides a dangerous wildcard), then the
  // most specific (its author judged this very name), then the most severe, then file order.
  static bool Better(const DenyRef& a, int spec_a, const DenyRef& b, int spec_b) {
    if (b.entry == nullptr) return true;
    if (a.entry->dangerous() != b.entry->dangerous()) return a.entry->dangerous();
    if (spec_a != spec_b) return spec_a > spec_b;
    if (a.entry->severity() != b.entry->severity()) {
      return a.entry->severity() > b.entry->severity();
    }
    return a.index < b.index;
  }

  // Deny matching for one (module, qualname). Candidates, over the dotted path
  // P = module.qualname split into components c0..ck-1 (m of them from the module):
  //   - "*" entries whose module is a run of components starting at c0 (the module, a dotted
  //     parent of it, or module plus leading qualname parts: torch + hub.load -> torch.hub);
  //   - exact entries (module', name') where module'.name' is a run of components;
  //   - the same two for runs starting inside the qualname (every suffix of the attribute
  //     chain: pathlib + os.system -> os.system; numpy + core._internal.sys.modules ->
  //     sys.modules), since an attribute chain reaches whatever its suffix names;
  //   - "*" module entries (bare names) equal to a qualname component.
  // Runs starting inside the module are not tried: a submodule named like a denied module is
  // a different module. The best match: see Better.
  // Defined in rule_compile.cc, next to the indexes it reads.
  DenyMatch MatchDeny(absl::string_view module, absl::string_view name) const;
};

namespace internal {

// Argument specs nest (tuple items, dict values) only as deep as the rules write them; this
// bounds it, and so the recursion of both validation and matching, whatever a rules file says.
inline constexpr int kMaxSpecDepth = 8;

// InvalidArgument "rules <origin>: <what>": how every check of a rules text reports.
absl::Status Invalid(std::string_view origin, const std::string& what);

// The path of the first string field of `root` that is not valid UTF-8 ("allow[3].name"), or
// nullopt. TextFormat accepts any bytes in a string field; the binary parser, like every proto3
// reader (the daemon's clients included), refuses them. Iterative: the walk's depth is the
// schema's, but no recursion is the rule.
std::optional<std::string> FirstNonUtf8Field(const google::protobuf::Message& root);

// How errors name an entry: "allow[3] (os.getcwd)", "deny[2] (os system)".
std::string AllowLabel(int i, const v1::AllowedGlobal& a);
std::string DenyLabel(int i, const v1::DenyEntry& d);

// The checks of one entry that need no other entry (its fields, call shapes, argument specs and
// build states); `label` names it in errors. Duplicates are found while indexing (Compile).
absl::Status ValidateAllowEntry(std::string_view origin, const std::string& label,
                                const v1::AllowedGlobal& a);
absl::Status ValidateDenyEntry(std::string_view origin, const std::string& label,
                               const v1::DenyEntry& d);

// A qualname component of the form __x__; IsDangerousDunder: one of the dunders that reach
// interpreter internals or call/patch things (kDangerousDunders in rule_evaluate.cc).
// Trusts `a`'s name as torch's add_safe_globals does (what `--allow NAME` means): every call
// opcode with any arguments, BUILD with any state, SETITEM(S) and APPEND(S) on its objects.
void TrustAsAddSafeGlobals(v1::AllowedGlobal* a);
// Whether `a` trusts its name that way (every call opcode with any arguments, any BUILD).
bool IsTrustedAsAddSafeGlobals(const v1::AllowedGlobal& a);
// Whether an overlay's allow entry names only a global (no call shape, target flag or build
// state): such an entry means what `--allow` means.
bool IsBareAllowEntry(const v1::AllowedGlobal& a);

bool IsDunder(absl::string_view c);
bool IsDangerousDunder(absl::string_view c);

}  // namespace internal
}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_RULE_SET_INTERNAL_H_
