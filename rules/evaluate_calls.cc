// The evaluation's call sites: calls matched against the allowed shapes, persistent ids.
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

void RuleSet::Impl::Run::Call(uint32_t ci) {
  const CallSite& c = g_->calls[ci];
  if (auto r = references_.find(ci); r != references_.end()) {
    ReferenceFinding(c, r->second);
    return;
  }
  switch (c.op) {
    case CallOp::kReduce:
    case CallOp::kNewObj:
    case CallOp::kNewObjEx:
    case CallOp::kObj:
    case CallOp::kInst:
      Invoke(c, ToRulesOp(c.op));
      return;
    case CallOp::kBuild:
      Build(c);
      return;
    case CallOp::kSetItems:
      Mutation(c, "call.setitem", "SETITEMS", &v1::AllowedGlobal::setitem_target,
               "a setitem target");
      return;
    case CallOp::kAppends:
      Mutation(c, "call.append", "APPENDS", &v1::AllowedGlobal::append_target, "an append target");
      return;
    case CallOp::kAddItems:
      Mutation(c, "call.append", "ADDITEMS", &v1::AllowedGlobal::append_target, "an append target");
      return;
    case CallOp::kPersistentLoad:
      Persistent(c);
      return;
  }
  // An unknown operation: inconsistent facts, reported once per pickle.
}

RuleSet::Impl::Run::Origin RuleSet::Impl::Run::OriginOf(const Node& n) const {
  Origin o;
  if (n.ref >= g_->calls.size()) {
    o.broken = true;
    return o;
  }
  const CallSite& producer = g_->calls[n.ref];
  if (ToRulesOp(producer.op) == v1::CALL_OP_UNSPECIFIED) return o;
  const Node* callee = internal::NodeAt(*g_, producer.callee);
  if (callee == nullptr) {
    o.broken = true;
    return o;
  }
  if (callee->kind != Kind::kGlobal) return o;
  if (callee->ref >= g_->globals.size()) {
    o.broken = true;
    return o;
  }
  o.named_global = true;
  o.global = callee->ref;
  o.allow = infos_[callee->ref].allow;
  return o;
}

std::string RuleSet::Impl::Run::Describe(NodeId id) const {
  const Node* n = internal::NodeAt(*g_, id);
  if (n == nullptr) return "<?>";
  if (n->kind == Kind::kGlobal) return absl::StrCat("global ", internal::GlobalName(*g_, *n));
  if (const Reference* r = ReferenceAt(id)) {
    return absl::StrCat("global ", internal::GlobalName(r->ref), " (read by getattr)");
  }
  if (n->kind == Kind::kCall) {
    Origin o = OriginOf(*n);
    if (o.named_global) {
      return absl::StrCat("call of ", internal::GlobalName(g_->globals[o.global]));
    }
    return "call result";
  }
  return pickle::KindName(n->kind);
}

std::string RuleSet::Impl::Run::GotText(v1::CallOp op, const CallSite& c) const {
  const Node* args = internal::NodeAt(*g_, c.args);
  std::vector<std::string> parts;
  if (args == nullptr) {
    if (c.args != pickle::kNoNode) parts.push_back("<?>");
  } else if (args->kind != Kind::kTuple) {
    parts.push_back(absl::StrCat("*", pickle::KindName(args->kind), " (not a tuple)"));
  } else {
    constexpr size_t kShown = 10;
    for (size_t i = 0; i < args->items.size() && i < kShown; ++i) {
      parts.push_back(Describe(args->items[i]));
    }
    if (args->items.size() > kShown) {
      parts.push_back(absl::StrCat("… ", args->items.size(), " arguments"));
    }
  }
  const Node* kw = internal::NodeAt(*g_, c.kwargs);
  if (kw != nullptr && !(kw->kind == Kind::kDict && kw->items.empty())) {
    parts.push_back(absl::StrCat("**", pickle::KindName(kw->kind)));
  }
  return absl::StrCat(CallOpLabel(op), "(", absl::StrJoin(parts, ", "), ")");
}

void RuleSet::Impl::Run::Invoke(const CallSite& c, v1::CallOp op) {
  const Node* callee = internal::NodeAt(*g_, c.callee);
  if (callee == nullptr) return;  // inconsistent facts, reported once per pickle
  if (const Reference* r = ReferenceAt(c.callee)) {
    // A call of the name the reference reads; an unlisted one's finding carries this call.
    if (r->allow != nullptr) AllowedCall(c, op, r->ref, *r->allow);
    return;
  }
  if (callee->kind != Kind::kGlobal) {
    v1::Finding* f =
        Add("call.callee", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_HIGH, c.offset, c.opcode);
    if (f == nullptr) return;
    f->set_category("introspection");
    f->set_call(Summary(c));
    SetMessage(f, absl::StrCat(CallOpLabel(op), " calls a ", Describe(c.callee),
                               ", not a global imported by name: the shape of getattr-chain "
                               "gadgets (getattr(module, 'system')('id'))"));
    return;
  }
  if (callee->ref >= g_->globals.size()) return;  // inconsistent facts, reported once per pickle
  const GlobalRef& ref = g_->globals[callee->ref];
  if (ref.via == Via::kExt || ref.via == Via::kDynamic) return;  // the global's finding carries it
  const v1::AllowedGlobal* allowed = infos_[callee->ref].allow;
  if (allowed == nullptr) return;  // the global's own finding carries this call
  AllowedCall(c, op, ref, *allowed);
}

void RuleSet::Impl::Run::AllowedCall(const CallSite& c, v1::CallOp op, const GlobalRef& ref,
                                     const v1::AllowedGlobal& allowed) {
  const Node* args = internal::NodeAt(*g_, c.args);
  if (args == nullptr && c.args != pickle::kNoNode)
    return;  // inconsistent facts, reported once per pickle
  static const std::vector<NodeId> kNoArgs;
  const std::vector<NodeId>* items = nullptr;
  if (args != nullptr && args->kind == Kind::kTuple) {
    items = &args->items;
  } else if (c.args == pickle::kNoNode && (op == v1::CALL_OBJ || op == v1::CALL_INST)) {
    items = &kNoArgs;
  }
  const Node* kw = c.kwargs == pickle::kNoNode ? nullptr : internal::NodeAt(*g_, c.kwargs);
  const bool kwargs_broken =
      c.kwargs != pickle::kNoNode && (kw == nullptr || kw->kind != Kind::kDict);
  const bool has_kwargs = kw != nullptr && !(kw->kind == Kind::kDict && kw->items.empty());
  if (items != nullptr && !kwargs_broken) {
    for (const v1::CallShape& s : allowed.calls()) {
      cost_hits_.clear();
      if (ShapeMatches(s, op, *items, has_kwargs)) {
        CallCheckCost(s.check(), *items);
        CostFinding(c, internal::GlobalName(ref));
        CountArguments(c);
        if (s.has_applies()) Applied(c, s, *items, 0);
        return;
      }
    }
    // Only once the entry's own shapes failed: every allowlisted REDUCE passes here.
    if (op == v1::CALL_REDUCE && !has_kwargs && TrustedReconstruction(ref, *items)) {
      CountArguments(c);
      return;
    }
  }

  const std::string name = internal::GlobalName(ref);
  if (allowed.calls().empty()) {
    ShapeFinding(
        c, name,
        absl::StrCat(name, " is allowlisted as data only, but it is called: got ", GotText(op, c)));
    return;
  }
  ShapeFinding(c, name,
               absl::StrCat(name, " is allowlisted, but this call matches none of its shapes: ",
                            "expected ", ExpectedShapes(allowed), ", got ", GotText(op, c)));
}

bool RuleSet::Impl::Run::TrustedReconstruction(const GlobalRef& callee,
                                               const std::vector<NodeId>& args) const {
  if (callee.resolved_module != "copyreg" || callee.resolved_name != "_reconstructor" ||
      args.size() != 3) {
    return false;
  }
  auto global = [this](NodeId id) -> const GlobalRef* {
    const Node* n = internal::NodeAt(*g_, id);
    if (n == nullptr || n->kind != Kind::kGlobal || n->ref >= g_->globals.size()) return nullptr;
    const GlobalRef& r = g_->globals[n->ref];
    return r.via == Via::kExt || r.via == Via::kDynamic ? nullptr : &r;
  };
  const GlobalRef* cls = global(args[0]);
  const GlobalRef* base = global(args[1]);
  const Node* state = internal::NodeAt(*g_, args[2]);
  if (cls == nullptr || base == nullptr || state == nullptr || state->kind != Kind::kNone ||
      base->resolved_module != "builtins" || base->resolved_name != "object") {
    return false;
  }
  const v1::AllowedGlobal* allow = infos_[internal::NodeAt(*g_, args[0])->ref].allow;
  return allow != nullptr && internal::IsTrustedAsAddSafeGlobals(*allow);
}

void RuleSet::Impl::Run::ShapeFinding(const CallSite& c, const std::string& name,
                                      std::string message) {
  v1::Finding* f =
      Add("call.shape", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  f->set_global(name);
  f->set_call(Summary(c));
  SetMessage(f, std::move(message));
}

std::string RuleSet::Impl::Run::ExpectedShapes(const v1::AllowedGlobal& allowed) {
  if (allowed.calls().empty()) return "no call";
  std::vector<std::string> expected;
  for (const v1::CallShape& s : allowed.calls()) expected.push_back(ShapeText(s));
  return absl::StrJoin(expected, " or ");
}

void RuleSet::Impl::Run::Applied(const CallSite& c, const v1::CallShape& shape,
                                 const std::vector<NodeId>& items, int depth) {
  const Node* func = internal::NodeAt(*g_, items[shape.applies().func()]);
  const Node* args = internal::NodeAt(*g_, items[shape.applies().args()]);
  // The shape matched: func is a global and args a tuple.
  if (func == nullptr || args == nullptr || func->ref >= g_->globals.size()) return;
  const GlobalRef& ref = g_->globals[func->ref];
  const v1::AllowedGlobal* allowed = infos_[func->ref].allow;
  if (allowed == nullptr) return;  // the global's own finding carries it
  if (depth < kMaxSpecDepth) {
    for (const v1::CallShape& s : allowed->calls()) {
      cost_hits_.clear();
      if (ShapeMatches(s, v1::CALL_REDUCE, args->items, false)) {
        CallCheckCost(s.check(), args->items);
        CostFinding(c, internal::GlobalName(ref));
        if (s.has_applies()) Applied(c, s, args->items, depth + 1);
        return;
      }
    }
  }
  const std::string name = internal::GlobalName(ref);
  constexpr size_t kShown = 10;
  std::vector<std::string> got;
  for (size_t i = 0; i < args->items.size() && i < kShown; ++i) {
    got.push_back(Describe(args->items[i]));
  }
  if (args->items.size() > kShown)
    got.push_back(absl::StrCat("… ", args->items.size(), " arguments"));
  ShapeFinding(
      c, name,
      absl::StrCat("the call applies ", name, " to arguments that match none of its shapes",
                   depth >= kMaxSpecDepth ? " (applications nested too deep)" : "", ": expected ",
                   ExpectedShapes(*allowed), ", got (", absl::StrJoin(got, ", "), ")"));
}

void RuleSet::Impl::Run::Mutation(const CallSite& c, absl::string_view rule_id,
                                  absl::string_view op_label,
                                  bool (v1::AllowedGlobal::*flag)() const,
                                  absl::string_view flag_label) {
  const Node* t = internal::NodeAt(*g_, c.callee);
  if (t == nullptr) return;  // inconsistent facts, reported once per pickle
  std::string what;
  v1::Severity severity = v1::SEVERITY_MEDIUM;
  std::string global;
  if (std::string name = SharedName(c.callee); !name.empty() || t->kind == Kind::kGlobal) {
    if (name.empty()) return;  // inconsistent facts, reported once per pickle
    global = std::move(name);
    what = absl::StrCat("the global ", global,
                        " itself: it mutates shared process state in place (os.environ, "
                        "sys.modules, registries)");
    severity = v1::SEVERITY_HIGH;
  } else if (t->kind == Kind::kCall) {
    Origin o = OriginOf(*t);
    if (o.broken) return;            // inconsistent facts, reported once per pickle
    if (o.allow == nullptr) return;  // not an allowlisted global: already reported
    if ((o.allow->*flag)()) return;
    what = absl::StrCat("the result of ", internal::GlobalName(g_->globals[o.global]),
                        ", which is not allowlisted as ", flag_label);
  } else {
    what = absl::StrCat("a ", pickle::KindName(t->kind));
  }
  v1::Finding* f = Add(rule_id, v1::VERDICT_SUSPICIOUS, severity, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  if (!global.empty()) f->set_global(global);
  f->set_call(Summary(c));
  SetMessage(f, absl::StrCat(op_label, " on ", what));
}

void RuleSet::Impl::Run::Persistent(const CallSite& c) {
  if (c.opcode == 'P') {
    v1::Finding* f =
        Add("persid.text", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
    if (f == nullptr) return;
    f->set_category("other");
    f->set_call(Summary(c));
    SetMessage(f,
               "PERSID (a protocol-0 text persistent id): torch.load cannot read one (torch "
               "2.6's torch.save(pickle_protocol=0) writes it, and its own load then fails); "
               "what it loads depends on the loader's persistent_load");
    return;
  }
  const Node* pid = internal::NodeAt(*g_, c.args);
  bool ok = false;
  if (pid != nullptr && pid->kind == Kind::kTuple && pid->items.size() >= 2) {
    const Node* tag = internal::NodeAt(*g_, pid->items[0]);
    const Node* cls = internal::NodeAt(*g_, pid->items[1]);
    ok = tag != nullptr && tag->kind == Kind::kStr && !tag->truncated && tag->text == "storage" &&
         cls != nullptr && cls->kind == Kind::kGlobal;
  }
  if (ok) return;
  v1::Finding* f =
      Add("persid.shape", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  f->set_category("other");
  f->set_call(Summary(c));
  SetMessage(f, absl::StrCat("persistent id ", Rendered(c.args, 120),
                             " is not ('storage', <storage class>, ...), the only id "
                             "torch.save writes"));
}

}  // namespace ckptscan::rules
