// The evaluation's argument specs and call shapes: what an allowed call may take.
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

bool RuleSet::Impl::Run::IsIntTuple(NodeId id, const Node& n) {
  if (n.kind != Kind::kTuple && n.kind != Kind::kList) return false;
  auto it = int_tuple_cache_.find(id);
  if (it != int_tuple_cache_.end()) return it->second;
  bool ok = true;
  for (NodeId item : n.items) {
    const Node* v = internal::NodeAt(*g_, item);
    if (v == nullptr || v->kind != Kind::kInt) {
      ok = false;
      break;
    }
  }
  int_tuple_cache_.emplace(id, ok);
  return ok;
}

bool RuleSet::Impl::Run::IsEmptyCall(const Node& n) const {
  if (!n.mutations.empty() || !n.states.empty() || n.ref >= g_->calls.size()) return false;
  const Node* args = internal::NodeAt(*g_, g_->calls[n.ref].args);
  if (args == nullptr) return g_->calls[n.ref].args == pickle::kNoNode;
  if (args->kind != Kind::kTuple) return false;
  if (args->items.empty()) return true;
  if (args->items.size() != 1) return false;
  const Node* only = internal::NodeAt(*g_, args->items[0]);
  return only != nullptr && (only->kind == Kind::kList || only->kind == Kind::kTuple) &&
         only->items.empty();
}

bool RuleSet::Impl::Run::SpecMatches(NodeId id, const v1::ArgSpec& spec, int depth) {
  if (depth > kMaxSpecDepth) return false;
  for (int kind : spec.any_of()) {
    // Cost bounds passed inside an attempt that fails belong to no match.
    const size_t hits = cost_hits_.size();
    if (ArgMatches(id, kind, spec, depth)) {
      const Node* n = internal::NodeAt(*g_, id);
      if (n != nullptr) CheckCost(*n, kind, spec);
      return true;
    }
    cost_hits_.resize(hits);
  }
  return false;
}

bool RuleSet::Impl::Run::SizedCode(absl::string_view text, absl::string_view prefix) {
  if (!absl::StartsWith(text, prefix)) return false;
  const absl::string_view digits = text.substr(prefix.size());
  if (digits.empty() || digits.size() > 9) return false;
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool RuleSet::Impl::Run::EachMatches(const Node& n, const v1::ArgSpec& spec, int depth) {
  if (!spec.has_each()) return true;
  for (NodeId item : n.items) {
    if (!SpecMatches(item, spec.each(), depth + 1)) return false;
  }
  return true;
}

bool RuleSet::Impl::Run::IntMatches(const Node& n, const v1::ArgSpec& spec) const {
  if (!spec.has_int_min() && !spec.has_int_max() && spec.int_values().empty()) return true;
  if (!n.fits) return false;
  if (!spec.int_values().empty() &&
      std::none_of(spec.int_values().begin(), spec.int_values().end(),
                   [&](int64_t v) { return n.i == absl::int128(v); })) {
    return false;
  }
  if (spec.has_int_min() && n.i < absl::int128(spec.int_min())) return false;
  if (spec.has_int_max() && n.i > absl::int128(spec.int_max())) return false;
  return true;
}

bool RuleSet::Impl::Run::DictMatches(const Node& n, const v1::ArgSpec& spec, int depth) {
  if (n.items.size() % 2 != 0) return false;
  std::vector<bool> seen(static_cast<size_t>(spec.keys_size()), false);
  for (size_t i = 0; i + 1 < n.items.size(); i += 2) {
    const Node* k = internal::NodeAt(*g_, n.items[i]);
    if (k == nullptr || k->kind != Kind::kStr || k->truncated) return false;
    if (spec.str_keys()) {
      if (spec.has_values() && !SpecMatches(n.items[i + 1], spec.values(), depth + 1)) {
        return false;
      }
      continue;
    }
    int found = -1;
    for (int j = 0; j < spec.keys_size(); ++j) {
      if (spec.keys(j).key() == k->text) {
        found = j;
        break;
      }
    }
    if (found < 0) return false;
    if (!SpecMatches(n.items[i + 1], spec.keys(found).value(), depth + 1)) return false;
    seen[static_cast<size_t>(found)] = true;
  }
  for (int j = 0; j < spec.keys_size(); ++j) {
    if (spec.keys(j).required() && !seen[static_cast<size_t>(j)]) return false;
  }
  return true;
}

bool RuleSet::Impl::Run::ArgMatches(NodeId id, int kind, const v1::ArgSpec& spec, int depth) {
  const Node* n = internal::NodeAt(*g_, id);
  if (n == nullptr) return false;
  switch (kind) {
    case v1::ARG_ANY:
      return true;
    case v1::ARG_NONE:
      return n->kind == Kind::kNone;
    case v1::ARG_BOOL:
      return n->kind == Kind::kBool && (!spec.has_bool_value() || n->b == spec.bool_value());
    case v1::ARG_INT:
      return n->kind == Kind::kInt && IntMatches(*n, spec);
    case v1::ARG_FLOAT:
      return n->kind == Kind::kFloat;
    case v1::ARG_STR:
      if (n->kind != Kind::kStr) return false;
      if (spec.str_values().empty() && spec.str_sized_prefixes().empty()) return true;
      if (n->truncated) return false;
      for (const std::string& v : spec.str_values()) {
        if (n->text == v) return true;
      }
      for (const std::string& p : spec.str_sized_prefixes()) {
        if (SizedCode(n->text, p)) return true;
      }
      return false;
    case v1::ARG_BYTES:
      return n->kind == Kind::kBytes || n->kind == Kind::kByteArray;
    case v1::ARG_INT_TUPLE:
      return IsIntTuple(id, *n);
    case v1::ARG_TUPLE:
      if (n->kind != Kind::kTuple) return false;
      if (!EachMatches(*n, spec, depth)) return false;
      if (spec.items().empty()) return true;
      if (n->items.size() != static_cast<size_t>(spec.items_size())) return false;
      for (int i = 0; i < spec.items_size(); ++i) {
        if (!SpecMatches(n->items[static_cast<size_t>(i)], spec.items(i), depth + 1)) {
          return false;
        }
      }
      return true;
    case v1::ARG_LIST:
      return n->kind == Kind::kList && EachMatches(*n, spec, depth);
    case v1::ARG_DICT:
      if (n->kind == Kind::kDict) {
        if (!spec.keys().empty() || spec.str_keys()) return DictMatches(*n, spec, depth);
        return !spec.empty() || n->items.empty();
      }
      if (n->kind == Kind::kCall) {
        if (!spec.keys().empty() || spec.str_keys()) return false;
        Origin o = OriginOf(*n);
        if (o.allow == nullptr || !o.allow->dict_like()) return false;
        return !spec.empty() || IsEmptyCall(*n);
      }
      return false;
    case v1::ARG_STORAGE:
      return n->kind == Kind::kPersistent;
    case v1::ARG_TENSOR:
      if (n->kind == Kind::kCall) {
        Origin o = OriginOf(*n);
        return o.allow != nullptr && o.allow->tensor();
      }
      return false;
    case v1::ARG_CALL: {
      if (n->kind != Kind::kCall) return false;
      Origin o = OriginOf(*n);
      if (o.broken || o.allow == nullptr) return false;
      return NameIn(g_->globals[o.global], spec);
    }
    case v1::ARG_GLOBAL: {
      if (const Reference* r = ReferenceAt(id)) {
        return spec.global_values().empty() || NameIn(r->ref, spec);
      }
      if (n->kind != Kind::kGlobal) return false;
      if (spec.global_values().empty()) return true;
      if (n->ref >= g_->globals.size()) return false;
      return NameIn(g_->globals[n->ref], spec);
    }
    default:
      return false;
  }
}

bool RuleSet::Impl::Run::NameIn(const GlobalRef& ref, const v1::ArgSpec& spec) {
  if (ref.via == Via::kExt || ref.via == Via::kDynamic) return false;
  const std::string name = absl::StrCat(ref.resolved_module, ".", ref.resolved_name);
  for (const std::string& v : spec.global_values()) {
    if (name == v) return true;
  }
  return false;
}

bool RuleSet::Impl::Run::ShapeMatches(const v1::CallShape& s, v1::CallOp op,
                                      const std::vector<NodeId>& args, bool has_kwargs) {
  if (s.op() != op) return false;
  if (args.size() < s.min_args() || args.size() > s.max_args()) return false;
  if (has_kwargs && !s.kwargs()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    arg_index_ = static_cast<int>(i);
    if (i < static_cast<size_t>(s.args_size())) {
      if (!SpecMatches(args[i], s.args(static_cast<int>(i)), 0)) return false;
    } else if (s.has_rest()) {
      if (!SpecMatches(args[i], s.rest(), 0)) return false;
    } else {
      break;
    }
  }
  return true;
}

std::string RuleSet::Impl::Run::SpecText(const v1::ArgSpec& spec, int depth) {
  if (depth > kMaxSpecDepth) return "…";
  std::vector<std::string> names;
  for (int k : spec.any_of()) {
    std::string label = ArgKindLabel(k);
    if (k == v1::ARG_STR) {
      std::vector<std::string> values;
      for (const std::string& v : spec.str_values()) values.push_back(absl::StrCat("'", v, "'"));
      for (const std::string& v : spec.str_sized_prefixes()) {
        values.push_back(absl::StrCat("'", v, "<n>'"));
      }
      if (!values.empty()) absl::StrAppend(&label, " ", absl::StrJoin(values, " or "));
    }
    if (k == v1::ARG_INT && (spec.has_int_min() || spec.has_int_max())) {
      if (spec.has_int_min() && spec.has_int_max() && spec.int_min() == spec.int_max()) {
        absl::StrAppend(&label, " ", spec.int_min());
      } else {
        absl::StrAppend(&label, " in [", spec.has_int_min() ? absl::StrCat(spec.int_min()) : "",
                        "..", spec.has_int_max() ? absl::StrCat(spec.int_max()) : "", "]");
      }
    }
    if (k == v1::ARG_TUPLE && !spec.items().empty()) {
      std::vector<std::string> items;
      for (const v1::ArgSpec& i : spec.items()) items.push_back(SpecText(i, depth + 1));
      absl::StrAppend(&label, " (", absl::StrJoin(items, ", "), ")");
    }
    if (k == v1::ARG_DICT && spec.empty()) absl::StrAppend(&label, " (empty)");
    if (k == v1::ARG_DICT && spec.str_keys()) absl::StrAppend(&label, " {str: ANY}");
    if (k == v1::ARG_DICT && !spec.keys().empty()) {
      std::vector<std::string> keys;
      for (const v1::DictKey& key : spec.keys()) {
        keys.push_back(absl::StrCat("'", key.key(), "'", key.required() ? "" : "?", ": ",
                                    SpecText(key.value(), depth + 1)));
      }
      absl::StrAppend(&label, " {", absl::StrJoin(keys, ", "), "}");
    }
    if ((k == v1::ARG_GLOBAL || k == v1::ARG_CALL) && !spec.global_values().empty()) {
      absl::StrAppend(&label, k == v1::ARG_CALL ? " of " : " ",
                      absl::StrJoin(spec.global_values(), " or "));
    }
    names.push_back(std::move(label));
  }
  return absl::StrJoin(names, "|");
}

std::string RuleSet::Impl::Run::ShapeText(const v1::CallShape& s) {
  std::vector<std::string> parts;
  const uint32_t shown = std::min<uint32_t>(s.max_args(), std::max<uint32_t>(s.min_args(), 12));
  for (uint32_t i = 0; i < shown; ++i) {
    const std::string kinds = i < static_cast<uint32_t>(s.args_size())
                                  ? SpecText(s.args(static_cast<int>(i)))
                                  : (s.has_rest() ? SpecText(s.rest()) : "ANY");
    parts.push_back(i < s.min_args() ? kinds : absl::StrCat("[", kinds, "]"));
  }
  if (shown < s.max_args()) parts.push_back("…");
  if (s.kwargs()) parts.push_back("**kwargs");
  return absl::StrCat(CallOpLabel(s.op()), "(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace ckptscan::rules
