// The evaluation's globals: each graded once per pickle (allowlist, deny entries, dunders).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "rules/rule_evaluate_run.h"

namespace ckptscan::rules {

bool RuleSet::Impl::Run::TooLong(const GlobalRef& ref) {
  return std::max({ref.module.size(), ref.name.size(), ref.resolved_module.size(),
                   ref.resolved_name.size()}) > RuleSet::kMaxGradedNameBytes;
}

std::string RuleSet::Impl::Run::AllowHint(const GlobalRef& ref) {
  auto plain = [](absl::string_view s) {
    if (s.empty() || s.size() > RuleSet::kMaxGradedNameBytes) return false;
    for (char c : s) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') {
        return false;
      }
    }
    return true;
  };
  const std::string& module = ref.resolved_module;
  const std::string& name = ref.resolved_name;
  if (!plain(module) || !plain(name)) return "";
  const std::string flag =
      absl::StrCat("--allow ", module, absl::StrContains(name, '.') ? ":" : ".", name);
  std::string hint;
  if (absl::StartsWith(module, "torch.nn.modules.") || module == "__main__") {
    hint =
        " A whole model object was probably saved (torch.save(model)): loading it runs its "
        "classes' code. Save model.state_dict() instead;";
  }
  return absl::StrCat(hint, " If you trust the file's origin and this name, allow it with ", flag,
                      " (or an allow entry in --rules-overlay).");
}

const RuleSet::Impl::Run::Grade& RuleSet::Impl::Run::GradeOf(const GlobalRef& ref) {
  std::string key =
      absl::StrCat(ref.resolved_module, absl::string_view("\0", 1), ref.resolved_name,
                   absl::string_view("\0", 1), ref.module, absl::string_view("\0", 1), ref.name);
  auto [it, inserted] = grades_.try_emplace(std::move(key));
  if (!inserted) return it->second;
  Grade& grade = it->second;
  grade.deny = rules_.MatchDeny(ref.resolved_module, ref.resolved_name);
  if (ref.module != ref.resolved_module || ref.name != ref.resolved_name) {
    DenyMatch raw = rules_.MatchDeny(ref.module, ref.name);
    if (raw && Impl::Better(raw.ref, raw.specificity, grade.deny.ref, grade.deny.specificity)) {
      grade.deny = std::move(raw);
    }
  }
  for (absl::string_view qualname :
       {absl::string_view(ref.resolved_name), absl::string_view(ref.name)}) {
    size_t begin = 0;
    for (size_t i = 0; i <= qualname.size(); ++i) {
      if (i != qualname.size() && qualname[i] != '.') continue;
      absl::string_view part = qualname.substr(begin, i - begin);
      begin = i + 1;
      if (!IsDunder(part)) continue;
      const bool dangerous = IsDangerousDunder(part);
      if (!grade.dunder || (dangerous && !grade.dangerous_dunder)) {
        grade.dunder = true;
        grade.dangerous_dunder = dangerous;
        grade.dunder_part = std::string(part);
      }
    }
  }
  return grade;
}

void RuleSet::Impl::Run::Global(uint32_t gi) {
  const GlobalRef& ref = g_->globals[gi];
  const GlobalInfo& info = infos_[gi];
  auto with_call = [&](v1::Finding* f) {
    if (info.first_call != kNone) f->set_call(Summary(g_->calls[info.first_call]));
  };

  if (ref.via == Via::kExt) {
    v1::Finding* f =
        Add("opcode.ext", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_HIGH, ref.offset, ref.opcode);
    if (f == nullptr) return;
    f->set_category("import");
    with_call(f);
    SetMessage(f, absl::StrCat("EXT extension code ", ref.ext_code,
                               " names a global through copyreg's extension registry: what it "
                               "imports depends on the loading process, so it is never SAFE"));
    return;
  }
  if (ref.via == Via::kDynamic) {
    v1::Finding* f =
        Add("global.dynamic", v1::VERDICT_DANGEROUS, v1::SEVERITY_CRITICAL, ref.offset, ref.opcode);
    if (f == nullptr) return;
    f->set_category("import");
    f->set_global(internal::DynamicGlobalName(ref));
    with_call(f);
    SetMessage(f, absl::StrCat("STACK_GLOBAL imports a ",
                               ref.module_computed && ref.name_computed ? "module and name"
                               : ref.module_computed                    ? "module"
                                                                        : "name",
                               " computed at load time (the result of a call), not written in "
                               "the file: whatever the call returns is imported"));
    return;
  }
  if (info.allow != nullptr || info.judged_by_references) return;

  const std::string name = internal::GlobalName(ref);
  const bool renamed = ref.module != ref.resolved_module || ref.name != ref.resolved_name;
  const std::string written = renamed
                                  ? absl::StrCat(" (written as ", internal::ShownName(ref.module),
                                                 ".", internal::ShownName(ref.name), ")")
                                  : "";

  if (TooLong(ref)) {
    v1::Finding* f =
        Add("global.unlisted", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_HIGH, ref.offset, ref.opcode);
    if (f == nullptr) return;
    f->set_category("other");
    f->set_global(name);
    with_call(f);
    SetMessage(f, absl::StrCat("a global whose module or name is longer than ",
                               RuleSet::kMaxGradedNameBytes,
                               " bytes: not on the allowlist and not graded further"));
    return;
  }

  const Grade& grade = GradeOf(ref);
  if (grade.deny) {
    const v1::DenyEntry& e = *grade.deny.ref.entry;
    const std::string category = CategoryName(e.category());
    v1::Finding* f = Add(absl::StrCat("global.denied.", category),
                         e.dangerous() ? v1::VERDICT_DANGEROUS : v1::VERDICT_SUSPICIOUS,
                         e.severity(), ref.offset, ref.opcode);
    if (f != nullptr) {
      f->set_category(category);
      f->set_global(name);
      with_call(f);
      std::string matched =
          grade.deny.matched == name ? "" : absl::StrCat(" [matches ", grade.deny.matched, "]");
      SetMessage(f,
                 absl::StrCat(name, written, " is denied (", category, ")", matched, ": ", e.why(),
                              e.source().empty() ? "" : " Source: ", e.source(),
                              e.source().empty() ? "" : ".", e.dangerous() ? "" : AllowHint(ref)));
    }
  }
  if (grade.dunder && !(grade.deny && grade.deny.ref.entry->dangerous())) {
    v1::Finding* f = Add(
        "global.dunder", grade.dangerous_dunder ? v1::VERDICT_DANGEROUS : v1::VERDICT_SUSPICIOUS,
        grade.dangerous_dunder ? v1::SEVERITY_HIGH : v1::SEVERITY_MEDIUM, ref.offset, ref.opcode);
    if (f != nullptr) {
      f->set_category("introspection");
      f->set_global(name);
      with_call(f);
      SetMessage(
          f, absl::StrCat(name, written, " reaches the dunder attribute ",
                          internal::ShownName(grade.dunder_part),
                          grade.dangerous_dunder ? ": an attribute chain into interpreter internals"
                                                 : ": an attribute chain outside the allowlist"));
    }
  }
  if (!grade.deny && !grade.dunder) {
    v1::Finding* f =
        Add("global.unlisted", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, ref.offset, ref.opcode);
    if (f != nullptr) {
      f->set_category("other");
      f->set_global(name);
      with_call(f);
      SetMessage(f,
                 absl::StrCat(name, written,
                              " is not on the allowlist: loading it imports its module "
                              "(which runs that module's code)",
                              info.first_call != kNone ? " and calls it." : ".", AllowHint(ref)));
    }
  }
}

}  // namespace ckptscan::rules
