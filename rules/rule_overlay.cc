// RuleSet::WithOverlay: a user's local allowlist (and extra deny entries) merged onto the
// built-in rules, and RuleSet::TrustedName, the entry an `--allow NAME` flag makes.
//
// An overlay widens what is SAFE, so it is checked against the rules it extends: it may add
// names, never change a built-in entry, and never allow a name the built-in rules grade
// DANGEROUS (docs/rules.md, "Local overlay").
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "rules/facts_view.h"
#include "rules/rule_set.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules {
namespace {

using base::AbslView;
using internal::AllowLabel;
using internal::DenyLabel;
using internal::Invalid;

bool ValidNamePart(absl::string_view part) {
  if (part.empty()) return false;
  for (char c : part) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '*' || c == ':' || c == '\0') {
      return false;
    }
  }
  return !absl::StartsWith(part, ".") && !absl::EndsWith(part, ".") &&
         !absl::StrContains(part, "..");
}

}  // namespace

void internal::TrustAsAddSafeGlobals(v1::AllowedGlobal* a) {
  a->clear_calls();
  constexpr uint32_t kAnyCount = std::numeric_limits<uint32_t>::max();
  for (v1::CallOp op :
       {v1::CALL_REDUCE, v1::CALL_NEWOBJ, v1::CALL_NEWOBJ_EX, v1::CALL_OBJ, v1::CALL_INST}) {
    v1::CallShape* shape = a->add_calls();
    shape->set_op(op);
    shape->set_min_args(0);
    shape->set_max_args(kAnyCount);
    if (op == v1::CALL_NEWOBJ_EX) shape->set_kwargs(true);
  }
  a->set_build_target(true);
  a->set_setitem_target(true);
  a->set_append_target(true);
}

bool internal::IsTrustedAsAddSafeGlobals(const v1::AllowedGlobal& a) {
  if (!a.build_target() || !a.build_states().empty()) return false;
  bool newobj_any = false;
  for (const v1::CallShape& s : a.calls()) {
    newobj_any = newobj_any || (s.op() == v1::CALL_NEWOBJ && s.min_args() == 0 &&
                                s.max_args() == std::numeric_limits<uint32_t>::max() &&
                                s.args().empty() && !s.has_applies() && !s.has_rest() &&
                                s.check() == v1::CallCheck{});
  }
  return newobj_any;
}

bool internal::IsBareAllowEntry(const v1::AllowedGlobal& a) {
  return a.calls().empty() && !a.build_target() && !a.setitem_target() && !a.append_target() &&
         !a.tensor() && !a.dict_like() && a.build_states().empty();
}

absl::StatusOr<v1::AllowedGlobal> RuleSet::TrustedName(std::string_view spec_in) {
  const absl::string_view spec = AbslView(spec_in);
  absl::string_view module, name;
  if (const size_t colon = spec.find(':'); colon != absl::string_view::npos) {
    module = spec.substr(0, colon);
    name = spec.substr(colon + 1);
  } else if (const size_t dot = spec.rfind('.'); dot != absl::string_view::npos) {
    module = spec.substr(0, dot);
    name = spec.substr(dot + 1);
  }
  if (!ValidNamePart(module) || !ValidNamePart(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--allow ", internal::ShownName(spec_in),
                     ": expected MODULE.NAME (e.g. mypkg.config.RunConfig) or MODULE:QUALNAME "
                     "(e.g. mypkg.config:Outer.Inner), without spaces or '*'"));
  }
  if (module.size() > kMaxGradedNameBytes || name.size() > kMaxGradedNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--allow: a module or name longer than ", kMaxGradedNameBytes, " bytes"));
  }
  v1::AllowedGlobal a;
  a.set_module(std::string(module));
  a.set_name(std::string(name));
  internal::TrustAsAddSafeGlobals(&a);
  a.set_note("Allowed by the user (--allow): trusted as torch's add_safe_globals trusts a name.");
  return a;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::WithOverlay(const RuleSet& base,
                                                                    const v1::RuleSet& overlay,
                                                                    std::string_view overlay_sha256,
                                                                    std::string_view origin) {
  // Why `base` would grade (module, name) DANGEROUS if it were not allowlisted, or "".
  auto dangerous_because = [&base](absl::string_view module,
                                   absl::string_view name) -> std::string {
    Impl::DenyMatch deny = base.impl_->MatchDeny(module, name);
    if (deny && deny.ref.entry->dangerous()) {
      return absl::StrCat("the rules grade it DANGEROUS (", deny.matched, ": ",
                          deny.ref.entry->why(), ")");
    }
    for (absl::string_view part : absl::StrSplit(name, '.')) {
      if (internal::IsDangerousDunder(part)) {
        return absl::StrCat("its component ", part,
                            " reaches interpreter internals, which the rules grade DANGEROUS");
      }
    }
    return "";
  };
  if (overlay.has_cost_budget()) {
    return Invalid(origin,
                   "cost_budget: an overlay only adds entries; it cannot change the "
                   "rules' cost budget");
  }
  auto impl = std::make_unique<Impl>();
  impl->proto = base.proto();
  absl::flat_hash_set<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < overlay.allow_size(); ++i) {
    const v1::AllowedGlobal& a = overlay.allow(i);
    const std::string label = AllowLabel(i, a);
    CKPT_RETURN_IF_ERROR(internal::ValidateAllowEntry(origin, label, a));
    if (!seen.emplace(a.module(), a.name()).second) {
      return Invalid(origin, absl::StrCat(label, ": duplicate entry"));
    }
    if (base.impl_->FindAllow(a.module(), a.name()) != nullptr) {
      return Invalid(origin,
                     absl::StrCat(label, ": already allowlisted by the rules (version ",
                                  base.version(), "); an overlay cannot change a built-in entry"));
    }
    if (std::string why = dangerous_because(a.module(), a.name()); !why.empty()) {
      return Invalid(origin, absl::StrCat(label, ": an overlay cannot allow this name: ", why));
    }
    *impl->proto.add_allow() = a;
  }
  for (int i = 0; i < overlay.deny_size(); ++i) {
    const v1::DenyEntry& d = overlay.deny(i);
    CKPT_RETURN_IF_ERROR(internal::ValidateDenyEntry(origin, DenyLabel(i, d), d));
    *impl->proto.add_deny() = d;
  }
  impl->proto.set_version(
      absl::StrCat(base.version(), "+overlay-sha256-", AbslView(overlay_sha256)));
  return Compile(std::move(impl), origin);
}

}  // namespace ckptscan::rules
