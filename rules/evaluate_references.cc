// The evaluation's getattr references: builtins.getattr(G, 'NAME') judged as the name G.NAME.
//
// Python 3.11 pickles an Enum member as getattr(EnumClass, 'NAME') (Enum.__reduce_ex__); every
// protocol writes a method bound to a class the same way, and protocols below 4 a nested class.
// Such a call imports G and reads one public attribute of it: what a protocol 4 STACK_GLOBAL of
// the dotted qualname G.NAME does. So it is graded as that name. Every other getattr (of a value
// that is not a global imported by name, with a computed, private or dunder name, with another
// arity, of a denied G or a denied G.NAME, or a getattr object used as anything but such a callee)
// keeps builtins.getattr's own grade.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "rules/rule_evaluate_run.h"

namespace ckptscan::rules {
namespace {

bool IsGetattrName(absl::string_view module, absl::string_view name) {
  return name == "getattr" && (module == "builtins" || module == "__builtin__");
}

// A global imported by name, as written in the stream: not EXT, not computed.
bool ImportedByName(const GlobalRef& ref) {
  return ref.via == Via::kGlobal || ref.via == Via::kStackGlobal;
}

bool IsGetattr(const GlobalRef& ref) {
  return ImportedByName(ref) && IsGetattrName(ref.module, ref.name) &&
         IsGetattrName(ref.resolved_module, ref.resolved_name);
}

// A str literal naming a public attribute: kept whole, not empty, no leading '_' (private names
// and dunders), no '.' (getattr does not follow dots; a dotted name is no attribute chain).
bool PublicAttributeName(const Node& n) {
  return n.kind == Kind::kStr && !n.truncated && !n.text.empty() && n.text[0] != '_' &&
         !absl::StrContains(n.text, '.');
}

}  // namespace

void RuleSet::Impl::Run::FindReferences() {
  references_.clear();
  if (!consistent_) return;  // ids are checked, but uses cannot be counted on broken facts
  const Graph& g = *g_;
  std::vector<uint8_t> is_getattr(g.globals.size(), 0);
  bool any = false;
  for (size_t gi = 0; gi < g.globals.size(); ++gi) {
    if (IsGetattr(g.globals[gi])) is_getattr[gi] = any = true;
  }
  if (!any) return;
  // The getattr global a node is, or kNone.
  auto getattr_of = [&](NodeId id) -> uint32_t {
    const Node* n = internal::NodeAt(g, id);
    if (n == nullptr || n->kind != Kind::kGlobal || n->ref >= g.globals.size()) return kNone;
    return is_getattr[n->ref] ? n->ref : kNone;
  };
  // A grade that keeps getattr's own: a deny entry of any category, or a dunder component.
  auto graded = [&](const GlobalRef& ref) {
    const Grade& grade = GradeOf(ref);
    return grade.deny || grade.dunder;
  };

  for (size_t ci = 0; ci < g.calls.size(); ++ci) {
    const CallSite& c = g.calls[ci];
    if (c.op != CallOp::kReduce || getattr_of(c.callee) == kNone) continue;
    const Node* args = internal::NodeAt(g, c.args);
    if (args == nullptr || args->kind != Kind::kTuple || args->items.size() != 2) continue;
    const Node* target = internal::NodeAt(g, args->items[0]);
    const Node* attr = internal::NodeAt(g, args->items[1]);
    if (target == nullptr || attr == nullptr || target->kind != Kind::kGlobal ||
        target->ref >= g.globals.size() || !PublicAttributeName(*attr)) {
      continue;
    }
    const GlobalRef& of = g.globals[target->ref];
    if (!ImportedByName(of)) continue;
    Reference r;
    r.ref.module = of.module;
    r.ref.name = absl::StrCat(of.name, ".", attr->text);
    r.ref.resolved_module = of.resolved_module;
    r.ref.resolved_name = absl::StrCat(of.resolved_name, ".", attr->text);
    r.ref.offset = c.offset;
    r.ref.opcode = c.opcode;
    r.ref.via = of.via;
    if (TooLong(r.ref) || graded(of) || graded(r.ref)) continue;
    r.allow = rules_.FindAllow(r.ref.resolved_module, r.ref.resolved_name);
    references_.emplace(static_cast<uint32_t>(ci), std::move(r));
  }
  if (references_.empty()) return;

  // Every use of a getattr object: as the callee of a reference, or anything else (an item,
  // a state, another call's callee or argument, the pickle's value).
  std::vector<uint64_t> as_callee(g.globals.size(), 0), other(g.globals.size(), 0);
  auto use = [&](NodeId id) {
    if (const uint32_t gi = getattr_of(id); gi != kNone) ++other[gi];
  };
  for (const Node& n : g.nodes) {
    for (NodeId id : n.items) use(id);
    for (NodeId id : n.states) use(id);
  }
  for (size_t ci = 0; ci < g.calls.size(); ++ci) {
    const CallSite& c = g.calls[ci];
    if (references_.contains(static_cast<uint32_t>(ci))) {
      ++as_callee[getattr_of(c.callee)];
    } else {
      use(c.callee);
    }
    use(c.args);
    use(c.kwargs);
  }
  use(pickle_->root);
  for (size_t gi = 0; gi < g.globals.size(); ++gi) {
    infos_[gi].judged_by_references = as_callee[gi] > 0 && other[gi] == 0;
  }

  // The first call of each reference's value (Finding.call).
  for (size_t ci = 0; ci < g.calls.size(); ++ci) {
    const CallSite& c = g.calls[ci];
    if (ToRulesOp(c.op) == v1::CALL_OP_UNSPECIFIED) continue;
    const Node* callee = internal::NodeAt(g, c.callee);
    if (callee == nullptr || callee->kind != Kind::kCall || ReferenceAt(c.callee) == nullptr) {
      continue;
    }
    Reference& r = references_.find(callee->ref)->second;
    if (r.first_call == kNone) r.first_call = static_cast<uint32_t>(ci);
  }
}

const RuleSet::Impl::Run::Reference* RuleSet::Impl::Run::ReferenceAt(NodeId id) const {
  if (references_.empty()) return nullptr;
  const Node* n = internal::NodeAt(*g_, id);
  if (n == nullptr || n->kind != Kind::kCall || n->ref >= g_->calls.size() ||
      g_->calls[n->ref].result != id) {
    return nullptr;
  }
  auto it = references_.find(n->ref);
  return it == references_.end() ? nullptr : &it->second;
}

std::string RuleSet::Impl::Run::SharedName(NodeId id) const {
  if (const Reference* r = ReferenceAt(id)) return internal::GlobalName(r->ref);
  const Node* n = internal::NodeAt(*g_, id);
  return n == nullptr ? "" : internal::GlobalName(*g_, *n);
}

void RuleSet::Impl::Run::ReferenceFinding(const CallSite& c, const Reference& r) {
  if (r.allow != nullptr) return;
  v1::Finding* f =
      Add("global.unlisted", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
  if (f == nullptr) return;
  const std::string name = internal::GlobalName(r.ref);
  f->set_category("other");
  f->set_global(name);
  f->set_call(Summary(r.first_call != kNone ? g_->calls[r.first_call] : c));
  SetMessage(f, absl::StrCat(name,
                             ", read by builtins.getattr (how Python 3.11 pickles an Enum member "
                             "and every version a method bound to a class), is not on the "
                             "allowlist: "
                             "loading it imports its module (which runs that module's code)",
                             r.first_call != kNone ? " and calls it." : ".", AllowHint(r.ref)));
}

}  // namespace ckptscan::rules
