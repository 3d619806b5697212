// The evaluation's BUILD states: allowed state checks, numpy dtype and array states.
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

void RuleSet::Impl::Run::Build(const CallSite& c) {
  const Node* t = internal::NodeAt(*g_, c.callee);
  if (t == nullptr) return;  // inconsistent facts, reported once per pickle
  if (const std::string name = SharedName(c.callee); !name.empty() || t->kind == Kind::kGlobal) {
    if (name.empty()) return;  // inconsistent facts, reported once per pickle
    v1::Finding* f =
        Add("call.build", v1::VERDICT_DANGEROUS, v1::SEVERITY_HIGH, c.offset, c.opcode);
    if (f == nullptr) return;
    f->set_category("introspection");
    f->set_global(name);
    f->set_call(Summary(c));
    SetMessage(f, absl::StrCat("BUILD sets state on the global ", name,
                               " itself (a class, function or module, or an attribute of one): "
                               "setattr on shared code, the write primitive of attribute-chain "
                               "gadgets"));
    return;
  }
  std::string what;
  if (t->kind == Kind::kCall) {
    Origin o = OriginOf(*t);
    if (o.broken) return;            // inconsistent facts, reported once per pickle
    if (o.allow == nullptr) return;  // not an allowlisted global: already reported
    if (o.allow->build_target()) {
      BuildState(c, *t, *o.allow, g_->globals[o.global]);
      return;
    }
    what = absl::StrCat("the result of ", internal::GlobalName(g_->globals[o.global]),
                        ", which is not allowlisted as a build target");
  } else {
    what = absl::StrCat("a ", pickle::KindName(t->kind));
  }
  v1::Finding* f =
      Add("call.build", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  f->set_call(Summary(c));
  SetMessage(f, absl::StrCat("BUILD (__setstate__ or __dict__ update) on ", what));
}

std::optional<absl::int128> RuleSet::Impl::Run::NumpyItemBytes(absl::string_view code) {
  static constexpr std::pair<absl::string_view, int> kFixed[] = {
      {"b1", 1},   {"i1", 1}, {"u1", 1},   {"i2", 2},   {"u2", 2}, {"i4", 4},
      {"u4", 4},   {"i8", 8}, {"u8", 8},   {"f2", 2},   {"f4", 4}, {"f8", 8},
      {"f16", 16}, {"c8", 8}, {"c16", 16}, {"c32", 32}, {"M8", 8}, {"m8", 8}};
  for (const auto& [c, size] : kFixed) {
    if (code == c) return absl::int128(size);
  }
  for (const auto& [prefix, unit] :
       {std::pair<absl::string_view, int>{"S", 1}, {"V", 1}, {"U", 4}}) {
    if (SizedCode(code, prefix)) {
      uint64_t n = 0;
      for (char ch : code.substr(1)) n = n * 10 + static_cast<uint64_t>(ch - '0');  // <= 9 digits
      return absl::int128(n) * unit;
    }
  }
  return std::nullopt;
}

const Node* RuleSet::Impl::Run::DtypeArgument(NodeId id) const {
  const Node* n = internal::NodeAt(*g_, id);
  if (n == nullptr || n->kind != Kind::kCall) return nullptr;
  Origin o = OriginOf(*n);
  if (o.broken || o.allow == nullptr) return nullptr;
  const GlobalRef& ref = g_->globals[o.global];
  if (ref.resolved_module != "numpy" || ref.resolved_name != "dtype") return nullptr;
  const Node* args = internal::NodeAt(*g_, g_->calls[n->ref].args);
  if (args == nullptr || args->kind != Kind::kTuple || args->items.empty()) return nullptr;
  return internal::NodeAt(*g_, args->items[0]);
}

const Node* RuleSet::Impl::Run::DtypeCode(NodeId id) const {
  const Node* code = DtypeArgument(id);
  return code != nullptr && code->kind == Kind::kStr && !code->truncated ? code : nullptr;
}

bool RuleSet::Impl::Run::IsRecordType(const Node* n) const {
  if (n == nullptr || n->kind != Kind::kGlobal || n->ref >= g_->globals.size()) return false;
  const GlobalRef& ref = g_->globals[n->ref];
  return ref.resolved_name == "record" &&
         (ref.resolved_module == "numpy" || ref.resolved_module == "numpy.core.records" ||
          ref.resolved_module == "numpy._core.records");
}

bool RuleSet::Impl::Run::Checked(v1::StateCheck check, const std::vector<NodeId>& made_args,
                                 NodeId state_id, NodeId target) {
  switch (check) {
    case v1::STATE_CHECK_NUMPY_DTYPE:
      return NumpyDtypeState(made_args, state_id, target);
    case v1::STATE_CHECK_NUMPY_ARRAY:
      return NumpyArrayState(state_id);
    default:
      return true;
  }
}

void RuleSet::Impl::Run::FieldDtypes(const Node& state, std::vector<NodeId>* out) const {
  if (state.kind != Kind::kTuple || state.items.size() < 5) return;
  const Node* fields = internal::NodeAt(*g_, state.items[4]);
  if (fields == nullptr || fields->kind != Kind::kDict) return;
  for (size_t i = 1; i < fields->items.size(); i += 2) {
    const Node* value = internal::NodeAt(*g_, fields->items[i]);
    if (value != nullptr && value->kind == Kind::kTuple && !value->items.empty()) {
      out->push_back(value->items[0]);
    }
  }
}

bool RuleSet::Impl::Run::FieldsReach(const Node& state, NodeId target) const {
  std::vector<NodeId> pending;
  FieldDtypes(state, &pending);
  absl::flat_hash_set<NodeId> visited;
  while (!pending.empty()) {
    const NodeId id = pending.back();
    pending.pop_back();
    if (id == target) return true;
    if (!visited.insert(id).second) continue;
    const Node* n = internal::NodeAt(*g_, id);
    if (n == nullptr) continue;
    for (NodeId s : n->states) {
      const Node* st = internal::NodeAt(*g_, s);
      if (st != nullptr) FieldDtypes(*st, &pending);
    }
  }
  return false;
}

bool RuleSet::Impl::Run::NumpyArrayState(NodeId state_id) const {
  const Node* state = internal::NodeAt(*g_, state_id);
  if (state == nullptr || state->kind != Kind::kTuple || state->items.size() != 5) return false;
  const Node* shape = internal::NodeAt(*g_, state->items[1]);
  const Node* code = DtypeCode(state->items[2]);
  // A record dtype's fields hold no objects (its state's check).
  const bool record = code == nullptr && IsRecordType(DtypeArgument(state->items[2]));
  const Node* data = internal::NodeAt(*g_, state->items[4]);
  if (shape == nullptr || (code == nullptr && !record) || data == nullptr) return false;
  const bool objects = code != nullptr && (code->text == "O8" || code->text == "O4");
  if (data->kind != Kind::kList) return !objects;
  if (!objects) return false;
  absl::int128 count = 1;
  for (NodeId d : shape->items) {
    const Node* dim = internal::NodeAt(*g_, d);
    if (dim == nullptr || dim->kind != Kind::kInt || !dim->fits || dim->i < 0) return false;
    if (dim->i != 0 && count > absl::int128(data->items.size()) / dim->i) {
      return false;  // more items than the list holds (and no overflow)
    }
    count *= dim->i;
  }
  return count == absl::int128(data->items.size());
}

bool RuleSet::Impl::Run::NumpyDtypeState(const std::vector<NodeId>& made_args, NodeId state_id,
                                         NodeId target) {
  const Node* state = internal::NodeAt(*g_, state_id);
  const Node* code = made_args.empty() ? nullptr : internal::NodeAt(*g_, made_args[0]);
  // numpy.dtype(numpy.record, ...): a void type whose item size is the state's elsize.
  const bool record = IsRecordType(code);
  if (state == nullptr || state->kind != Kind::kTuple || state->items.size() < 8 ||
      code == nullptr || (!record && (code->kind != Kind::kStr || code->truncated))) {
    return false;
  }
  const Node* elsize = internal::NodeAt(*g_, state->items[5]);
  if (elsize == nullptr || elsize->kind != Kind::kInt || !elsize->fits || elsize->i < 0) {
    return false;
  }
  if (!record) {
    const std::optional<absl::int128> size = NumpyItemBytes(code->text);
    if (!size) return false;
    const bool sized =
        SizedCode(code->text, "S") || SizedCode(code->text, "U") || SizedCode(code->text, "V");
    if (sized && *size != elsize->i) return false;
  }
  const Node* names = internal::NodeAt(*g_, state->items[3]);
  const Node* fields = internal::NodeAt(*g_, state->items[4]);
  if (names == nullptr || fields == nullptr) return false;
  if (names->kind == Kind::kNone) return fields->kind == Kind::kNone;
  if (names->kind != Kind::kTuple || fields->kind != Kind::kDict || names->items.empty() ||
      fields->items.size() % 2 != 0) {
    return false;
  }
  absl::flat_hash_set<std::string> keys;
  for (size_t i = 0; i + 1 < fields->items.size(); i += 2) {
    const Node* key = internal::NodeAt(*g_, fields->items[i]);
    const Node* value = internal::NodeAt(*g_, fields->items[i + 1]);
    if (key == nullptr || key->kind != Kind::kStr || key->truncated || value == nullptr ||
        value->kind != Kind::kTuple || value->items.size() != 2) {
      return false;
    }
    const Node* field_code = DtypeCode(value->items[0]);
    const Node* offset = internal::NodeAt(*g_, value->items[1]);
    if (field_code == nullptr || offset == nullptr || offset->kind != Kind::kInt || !offset->fits ||
        offset->i < 0) {
      return false;
    }
    const std::optional<absl::int128> field_size = NumpyItemBytes(field_code->text);
    if (!field_size || offset->i + *field_size > elsize->i) return false;
    keys.insert(key->text);
  }
  if (FieldsReach(*state, target)) return false;
  absl::flat_hash_set<std::string> seen;
  for (NodeId id : names->items) {
    const Node* name = internal::NodeAt(*g_, id);
    if (name == nullptr || name->kind != Kind::kStr || name->truncated ||
        !keys.contains(name->text) || !seen.insert(name->text).second) {
      return false;
    }
  }
  return seen.size() == keys.size();
}

void RuleSet::Impl::Run::BuildState(const CallSite& c, const Node& target,
                                    const v1::AllowedGlobal& allowed, const GlobalRef& ref) {
  if (allowed.build_states().empty()) {
    CountArguments(c);
    return;
  }
  const CallSite& producer = g_->calls[target.ref];
  const Node* made = internal::NodeAt(*g_, producer.args);
  static const std::vector<NodeId> kNoArgs;
  const std::vector<NodeId>& made_args =
      made != nullptr && made->kind == Kind::kTuple ? made->items : kNoArgs;
  std::vector<std::string> expected;
  for (const v1::BuildState& b : allowed.build_states()) {
    bool made_ok = true;
    for (int i = 0; i < b.made_with_size() && made_ok; ++i) {
      made_ok = static_cast<size_t>(i) < made_args.size() &&
                SpecMatches(made_args[static_cast<size_t>(i)], b.made_with(i), 1);
    }
    if (!made_ok) continue;
    cost_hits_.clear();
    arg_index_ = -1;
    if (SpecMatches(c.args, b.state(), 0) && Checked(b.check(), made_args, c.args, c.callee)) {
      CostFinding(c, internal::GlobalName(ref));
      CountArguments(c);
      return;
    }
    expected.push_back(SpecText(b.state()));
  }
  if (TrustedReconstruction(ref, made_args)) {
    // An object of a class the user trusts: any state, as for the same object made by NEWOBJ.
    CountArguments(c);
    return;
  }
  v1::Finding* f =
      Add("call.build_state", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_HIGH, c.offset, c.opcode);
  if (f == nullptr) return;
  const std::string name = internal::GlobalName(ref);
  f->set_category("other");
  f->set_global(name);
  f->set_call(Summary(c));
  constexpr size_t kShownStates = 3;
  if (expected.size() > kShownStates) {
    const size_t more = expected.size() - kShownStates;
    expected.resize(kShownStates);
    expected.push_back(absl::StrCat("… ", more, " more"));
  }
  SetMessage(
      f, absl::StrCat("BUILD gives the result of ", name, " a state ", Rendered(c.args, 160),
                      " that is not one its loader writes for it; the loader trusts this state ",
                      "(flags, positions, attributes)",
                      expected.empty()
                          ? absl::StrCat(", and no state is allowed for an object made by ",
                                         Summary(producer))
                          : absl::StrCat(": expected ", absl::StrJoin(expected, " or "))));
}

}  // namespace ckptscan::rules
