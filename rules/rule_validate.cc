// Validation of a parsed ckptscan.v1.RuleSet: the checks of each allow and deny entry that need
// no other entry (call shapes, argument specs, build states), and the UTF-8 check of text input.
// The errors name the entry and field and read "rules <origin>: ...". Checks that need the
// indexes (duplicates) are Compile's (rule_compile.cc).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_text.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "google/protobuf/descriptor.h"
#include "rules/facts_view.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules::internal {
namespace {

using base::AbslView;

bool Takes(const v1::ArgSpec& spec, v1::ArgKind kind) {
  return std::find(spec.any_of().begin(), spec.any_of().end(), kind) != spec.any_of().end();
}

absl::Status ValidateSpec(std::string_view origin, const std::string& where,
                          const v1::ArgSpec& spec, int depth) {
  if (depth > kMaxSpecDepth) {
    return Invalid(origin, absl::StrCat(where, ": specs nested deeper than ", kMaxSpecDepth));
  }
  if (spec.any_of_size() == 0) return Invalid(origin, absl::StrCat(where, ": any_of is empty"));
  for (int kind : spec.any_of()) {
    if (kind == v1::ARG_KIND_UNSPECIFIED || !v1::ArgKind_IsValid(kind)) {
      return Invalid(origin, absl::StrCat(where, ": invalid argument kind ", kind));
    }
  }
  const bool takes_dict = Takes(spec, v1::ARG_DICT);
  if (spec.empty() && !takes_dict) {
    return Invalid(origin, absl::StrCat(where, ": empty without ARG_DICT"));
  }
  if (!spec.global_values().empty() && !Takes(spec, v1::ARG_GLOBAL) && !Takes(spec, v1::ARG_CALL)) {
    return Invalid(origin, absl::StrCat(where, ": global_values without ARG_GLOBAL or ARG_CALL"));
  }
  if (Takes(spec, v1::ARG_CALL) && spec.global_values().empty()) {
    return Invalid(origin, absl::StrCat(where, ": ARG_CALL without global_values"));
  }
  if (!Takes(spec, v1::ARG_STR) &&
      (!spec.str_values().empty() || !spec.str_sized_prefixes().empty())) {
    return Invalid(
        origin,
        absl::StrCat(where, ": ", spec.str_values().empty() ? "str_sized_prefixes" : "str_values",
                     " without ARG_STR"));
  }
  if ((spec.has_int_min() || spec.has_int_max() || !spec.int_values().empty()) &&
      !Takes(spec, v1::ARG_INT)) {
    return Invalid(origin, absl::StrCat(where, ": int_min, int_max or int_values without ARG_INT"));
  }
  if (spec.has_bool_value() && !Takes(spec, v1::ARG_BOOL)) {
    return Invalid(origin, absl::StrCat(where, ": bool_value without ARG_BOOL"));
  }
  if (spec.has_each() && !Takes(spec, v1::ARG_TUPLE) && !Takes(spec, v1::ARG_LIST)) {
    return Invalid(origin, absl::StrCat(where, ": each without ARG_TUPLE or ARG_LIST"));
  }
  if (spec.has_each()) {
    CKPT_RETURN_IF_ERROR(
        ValidateSpec(origin, absl::StrCat(where, " each"), spec.each(), depth + 1));
  }
  if (spec.has_int_min() && spec.has_int_max() && spec.int_min() > spec.int_max()) {
    return Invalid(
        origin, absl::StrCat(where, ": int_min ", spec.int_min(), " > int_max ", spec.int_max()));
  }
  if (!spec.items().empty() && !Takes(spec, v1::ARG_TUPLE)) {
    return Invalid(origin, absl::StrCat(where, ": items without ARG_TUPLE"));
  }
  if (!spec.keys().empty() && !takes_dict) {
    return Invalid(origin, absl::StrCat(where, ": keys without ARG_DICT"));
  }
  if (spec.str_keys() && !takes_dict) {
    return Invalid(origin, absl::StrCat(where, ": str_keys without ARG_DICT"));
  }
  if (spec.has_values() && !spec.str_keys()) {
    return Invalid(origin, absl::StrCat(where, ": values without str_keys"));
  }
  if (spec.has_values()) {
    CKPT_RETURN_IF_ERROR(
        ValidateSpec(origin, absl::StrCat(where, " values"), spec.values(), depth + 1));
  }
  // Cost bounds: each on the kind it measures, and never beside ARG_ANY, which would match the
  // same value unbounded.
  if (spec.has_max_bytes() && !Takes(spec, v1::ARG_STR) && !Takes(spec, v1::ARG_BYTES)) {
    return Invalid(origin, absl::StrCat(where, ": max_bytes without ARG_STR or ARG_BYTES"));
  }
  if (spec.has_max_int_bits() && !Takes(spec, v1::ARG_INT)) {
    return Invalid(origin, absl::StrCat(where, ": max_int_bits without ARG_INT"));
  }
  if (spec.has_max_elements() && !Takes(spec, v1::ARG_INT_TUPLE)) {
    return Invalid(origin, absl::StrCat(where, ": max_elements without ARG_INT_TUPLE"));
  }
  if (spec.has_max_sized_bytes() && spec.str_sized_prefixes().empty()) {
    return Invalid(origin, absl::StrCat(where, ": max_sized_bytes without str_sized_prefixes"));
  }
  if (spec.has_number_text() && !Takes(spec, v1::ARG_STR)) {
    return Invalid(origin, absl::StrCat(where, ": number_text without ARG_STR"));
  }
  const bool bounded = spec.has_max_bytes() || spec.has_max_int_bits() || spec.has_max_elements() ||
                       spec.has_max_sized_bytes() || spec.has_number_text();
  if (bounded && Takes(spec, v1::ARG_ANY)) {
    return Invalid(origin, absl::StrCat(where,
                                        ": a cost bound beside ARG_ANY (which takes the same value "
                                        "unbounded)"));
  }
  const int dict_forms = static_cast<int>(!spec.keys().empty()) + static_cast<int>(spec.empty()) +
                         static_cast<int>(spec.str_keys());
  if (dict_forms > 1) {
    return Invalid(origin, absl::StrCat(where, ": keys, empty and str_keys exclude each other"));
  }
  for (int i = 0; i < spec.items_size(); ++i) {
    CKPT_RETURN_IF_ERROR(
        ValidateSpec(origin, absl::StrCat(where, " items[", i, "]"), spec.items(i), depth + 1));
  }
  for (int i = 0; i < spec.keys_size(); ++i) {
    const v1::DictKey& k = spec.keys(i);
    for (int j = 0; j < i; ++j) {
      if (spec.keys(j).key() == k.key()) {
        return Invalid(origin,
                       absl::StrCat(where, " keys[", i, "]: duplicate key '", k.key(), "'"));
      }
    }
    CKPT_RETURN_IF_ERROR(
        ValidateSpec(origin, absl::StrCat(where, " keys['", k.key(), "']"), k.value(), depth + 1));
  }
  return absl::OkStatus();
}

absl::Status ValidateBuildStates(std::string_view origin, const std::string& label,
                                 const v1::AllowedGlobal& a) {
  if (a.build_states().empty()) return absl::OkStatus();
  if (!a.build_target()) {
    return Invalid(origin, absl::StrCat(label, ": build_states without build_target"));
  }
  if (a.calls().empty()) {
    return Invalid(origin, absl::StrCat(label, ": build_states on an entry that is never called"));
  }
  for (int i = 0; i < a.build_states_size(); ++i) {
    const v1::BuildState& b = a.build_states(i);
    const std::string where = absl::StrCat(label, " build_states[", i, "]");
    for (int j = 0; j < b.made_with_size(); ++j) {
      CKPT_RETURN_IF_ERROR(
          ValidateSpec(origin, absl::StrCat(where, " made_with[", j, "]"), b.made_with(j), 1));
    }
    CKPT_RETURN_IF_ERROR(ValidateSpec(origin, absl::StrCat(where, " state"), b.state(), 0));
    if (!v1::StateCheck_IsValid(b.check())) {
      return Invalid(origin, absl::StrCat(where, ": unknown check ", b.check()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateShape(std::string_view origin, const std::string& label, int si,
                           const v1::CallShape& s) {
  const std::string where = absl::StrCat(label, " calls[", si, "]");
  if (s.op() == v1::CALL_OP_UNSPECIFIED || !v1::CallOp_IsValid(s.op())) {
    return Invalid(origin, absl::StrCat(where,
                                        ": op must be one of CALL_REDUCE, CALL_NEWOBJ, "
                                        "CALL_NEWOBJ_EX, CALL_OBJ, CALL_INST"));
  }
  if (s.min_args() > s.max_args()) {
    return Invalid(origin,
                   absl::StrCat(where, ": min_args ", s.min_args(), " > max_args ", s.max_args()));
  }
  if (static_cast<uint64_t>(s.args_size()) > s.max_args()) {
    return Invalid(origin, absl::StrCat(where, ": ", s.args_size(),
                                        " argument specs but max_args is ", s.max_args()));
  }
  if (s.kwargs() && s.op() != v1::CALL_NEWOBJ_EX) {
    return Invalid(origin, absl::StrCat(where, ": kwargs is only meaningful for CALL_NEWOBJ_EX"));
  }
  for (int ai = 0; ai < s.args_size(); ++ai) {
    CKPT_RETURN_IF_ERROR(
        ValidateSpec(origin, absl::StrCat(where, " args[", ai, "]"), s.args(ai), 0));
  }
  if (s.has_rest()) {
    if (static_cast<uint64_t>(s.args_size()) >= s.max_args()) {
      return Invalid(origin, absl::StrCat(where, ": rest is set but max_args ", s.max_args(),
                                          " leaves no position beyond the ", s.args_size(),
                                          " argument specs"));
    }
    CKPT_RETURN_IF_ERROR(ValidateSpec(origin, absl::StrCat(where, " rest"), s.rest(), 0));
  }
  if (!v1::CallCheck_IsValid(s.check())) {
    return Invalid(origin, absl::StrCat(where, ": unknown check ", s.check()));
  }
  if (s.has_applies()) {
    const v1::Apply& a = s.applies();
    auto takes = [&](uint32_t i, v1::ArgKind kind) {
      return i < static_cast<uint32_t>(s.args_size()) && Takes(s.args(static_cast<int>(i)), kind) &&
             s.args(static_cast<int>(i)).any_of_size() == 1;
    };
    if (a.func() == a.args() || !takes(a.func(), v1::ARG_GLOBAL) ||
        !takes(a.args(), v1::ARG_TUPLE) || a.func() >= s.min_args() || a.args() >= s.min_args()) {
      return Invalid(origin,
                     absl::StrCat(where,
                                  ": applies needs two different required arguments, "
                                  "func of kind ARG_GLOBAL only and args of ARG_TUPLE only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Invalid(std::string_view origin, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("rules ", AbslView(origin), ": ", what));
}

std::string AllowLabel(int i, const v1::AllowedGlobal& a) {
  return absl::StrCat("allow[", i, "] (", ShownName(a.module()), ".", ShownName(a.name()), ")");
}

std::string DenyLabel(int i, const v1::DenyEntry& d) {
  return absl::StrCat("deny[", i, "] (", ShownName(d.module()), " ", ShownName(d.name()), ")");
}

std::optional<std::string> FirstNonUtf8Field(const google::protobuf::Message& root) {
  using google::protobuf::FieldDescriptor;
  using google::protobuf::Message;
  std::vector<std::pair<const Message*, std::string>> pending = {{&root, ""}};
  while (!pending.empty()) {
    auto [m, path] = std::move(pending.back());
    pending.pop_back();
    const google::protobuf::Reflection* r = m->GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r->ListFields(*m, &fields);
    for (const FieldDescriptor* f : fields) {
      const int n = f->is_repeated() ? r->FieldSize(*m, f) : 1;
      for (int i = 0; i < n; ++i) {
        std::string at = absl::StrCat(path, path.empty() ? "" : ".", f->name());
        if (f->is_repeated()) absl::StrAppend(&at, "[", i, "]");
        if (f->type() == FieldDescriptor::TYPE_STRING) {
          std::string scratch;
          const std::string& v = f->is_repeated()
                                     ? r->GetRepeatedStringReference(*m, f, i, &scratch)
                                     : r->GetStringReference(*m, f, &scratch);
          if (!base::IsValidUtf8(v)) return at;
        } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          pending.emplace_back(
              f->is_repeated() ? &r->GetRepeatedMessage(*m, f, i) : &r->GetMessage(*m, f),
              std::move(at));
        }
      }
    }
  }
  return std::nullopt;
}

absl::Status ValidateAllowEntry(std::string_view origin, const std::string& label,
                                const v1::AllowedGlobal& a) {
  if (a.module().empty() || a.name().empty()) {
    return Invalid(origin, absl::StrCat(label, ": module and name are required"));
  }
  if (a.module() == "*" || a.name() == "*") {
    return Invalid(origin, absl::StrCat(label, ": allow entries are exact; \"*\" is not allowed"));
  }
  for (int si = 0; si < a.calls_size(); ++si) {
    CKPT_RETURN_IF_ERROR(ValidateShape(origin, label, si, a.calls(si)));
  }
  return ValidateBuildStates(origin, label, a);
}

absl::Status ValidateDenyEntry(std::string_view origin, const std::string& label,
                               const v1::DenyEntry& d) {
  if (d.module().empty()) return Invalid(origin, absl::StrCat(label, ": module is empty"));
  if (d.name().empty()) return Invalid(origin, absl::StrCat(label, ": name is empty"));
  if (d.module() == "*" && d.name() == "*") {
    return Invalid(origin, absl::StrCat(label, ": module and name cannot both be \"*\""));
  }
  if (d.module() == "*" && absl::StrContains(d.name(), '.')) {
    return Invalid(origin, absl::StrCat(label, ": a bare name (module \"*\") is one component"));
  }
  if (d.category() == v1::CATEGORY_UNSPECIFIED || !v1::Category_IsValid(d.category())) {
    return Invalid(origin, absl::StrCat(label, ": category is missing or invalid"));
  }
  if (d.severity() == v1::SEVERITY_UNSPECIFIED || !v1::Severity_IsValid(d.severity())) {
    return Invalid(origin, absl::StrCat(label, ": severity is missing or invalid"));
  }
  return absl::OkStatus();
}

}  // namespace ckptscan::rules::internal
