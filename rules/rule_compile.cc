// RuleSet::Compile: a validated RuleSet's indexes (allow by exact name; deny by exact name,
// module wildcard and bare name), and MatchDeny, the lookup of the best deny entry for a global
// over those indexes. Entry checks are rule_validate.cc's; Compile adds the duplicate checks.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "rules/facts_view.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules {
namespace {

using internal::AllowLabel;
using internal::DenyLabel;
using internal::Invalid;
using internal::ValidateAllowEntry;
using internal::ValidateDenyEntry;

size_t CountParts(absl::string_view dotted) {
  return static_cast<size_t>(std::count(dotted.begin(), dotted.end(), '.')) + 1;
}

std::string ShownName(absl::string_view s) { return internal::ShownName(base::StdView(s)); }

}  // namespace

RuleSet::Impl::DenyMatch RuleSet::Impl::MatchDeny(absl::string_view module,
                                                  absl::string_view name) const {
  const std::string path = module.empty() ? std::string(name) : absl::StrCat(module, ".", name);
  std::vector<std::pair<size_t, size_t>> parts;  // [begin, end) of each component
  size_t begin = 0;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '.') {
      parts.emplace_back(begin, i);
      begin = i + 1;
    }
  }
  const size_t k = parts.size();
  const size_t m = module.empty() ? 0 : CountParts(module);
  const absl::string_view p(path);
  auto run = [&](size_t from, size_t to) {  // components [from, to), to > from
    return p.substr(parts[from].first, parts[to - 1].second - parts[from].first);
  };

  DenyMatch best;
  // Label pieces of the best candidate, built into a string once at the end.
  size_t best_from = 0, best_mid = 0, best_to = 0;
  int best_kind = 0;  // 1 bare, 2 star, 3 exact
  auto consider = [&](const DenyRef& ref, int kind, size_t from, size_t mid, size_t to) {
    const int spec = kind * 1000 + static_cast<int>(to - from);
    if (Better(ref, spec, best.ref, best.specificity)) {
      best.ref = ref;
      best.specificity = spec;
      best_kind = kind;
      best_from = from, best_mid = mid, best_to = to;
    }
  };

  for (size_t j = 0; j < k; j = (j == 0 && m > 1) ? m : j + 1) {
    for (size_t s = j + 1; s <= k && s - j <= star_module_parts; ++s) {
      auto it = deny_module.find(run(j, s));
      if (it != deny_module.end()) consider(it->second, 2, j, s, s);
    }
    for (size_t s = j + 1; s < k && s - j <= exact_module_parts; ++s) {
      auto mod = deny_exact.find(run(j, s));
      if (mod == deny_exact.end()) continue;
      for (size_t t = s + 1; t <= k && t - s <= exact_name_parts; ++t) {
        auto it = mod->second.find(run(s, t));
        if (it != mod->second.end()) consider(it->second, 3, j, s, t);
      }
    }
  }
  if (!deny_bare.empty()) {
    for (size_t t = m; t < k; ++t) {
      auto it = deny_bare.find(run(t, t + 1));
      if (it != deny_bare.end()) consider(it->second, 1, t, t, t + 1);
    }
  }
  if (best) {
    switch (best_kind) {
      case 1:
        best.matched = absl::StrCat("*.", ShownName(run(best_from, best_to)));
        break;
      case 2:
        best.matched = absl::StrCat(ShownName(run(best_from, best_mid)), ".*");
        break;
      default:
        best.matched = ShownName(run(best_from, best_to));
        break;
    }
  }
  return best;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Compile(std::unique_ptr<Impl> impl,
                                                                std::string_view origin) {
  const v1::RuleSet& p = impl->proto;
  if (p.version().empty()) return Invalid(origin, "version is empty");

  for (int i = 0; i < p.allow_size(); ++i) {
    const v1::AllowedGlobal& a = p.allow(i);
    const std::string label = AllowLabel(i, a);
    CKPT_RETURN_IF_ERROR(ValidateAllowEntry(origin, label, a));
    auto [it, inserted] = impl->allow[a.module()].try_emplace(a.name(), &a);
    if (!inserted) {
      int first = 0;
      while (&p.allow(first) != it->second) ++first;
      return Invalid(origin,
                     absl::StrCat(label, ": duplicate entry (first at allow[", first, "])"));
    }
  }

  for (int i = 0; i < p.deny_size(); ++i) {
    const v1::DenyEntry& d = p.deny(i);
    const std::string label = DenyLabel(i, d);
    CKPT_RETURN_IF_ERROR(ValidateDenyEntry(origin, label, d));
    const Impl::DenyRef ref{&d, i};
    bool inserted = false;
    if (d.module() == "*") {
      inserted = impl->deny_bare.try_emplace(d.name(), ref).second;
    } else if (d.name() == "*") {
      inserted = impl->deny_module.try_emplace(d.module(), ref).second;
      impl->star_module_parts = std::max(impl->star_module_parts, CountParts(d.module()));
    } else {
      inserted = impl->deny_exact[d.module()].try_emplace(d.name(), ref).second;
      impl->exact_module_parts = std::max(impl->exact_module_parts, CountParts(d.module()));
      impl->exact_name_parts = std::max(impl->exact_name_parts, CountParts(d.name()));
    }
    if (!inserted) return Invalid(origin, absl::StrCat(label, ": duplicate entry"));
  }
  return std::make_shared<const RuleSet>(Passkey(), std::move(impl));
}

}  // namespace ckptscan::rules
