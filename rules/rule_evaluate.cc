// Evaluation: RuleSet::Evaluate turns a stream's VM facts into findings and a verdict.
// RuleSet::Impl::Run walks each pickle's globals and call sites in stream order: it grades
// globals (allowlist, deny entries, dunders), matches calls against the allowed call shapes and
// argument specs, checks BUILD states and persistent ids, and caps the findings it keeps.
// Facts are not trusted: every id is checked before use.
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
#include "rules/facts_view.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules {

namespace internal {

bool IsDunder(absl::string_view c) {
  return c.size() > 4 && absl::StartsWith(c, "__") && absl::EndsWith(c, "__");
}

// Dunders that reach interpreter internals or call/patch things: DANGEROUS (the
// __builtins__/__globals__/__subclasses__ escapes of published picklescan bypasses). Any other
// dunder component is SUSPICIOUS.
constexpr absl::string_view kDangerousDunders[] = {
    "__base__",       "__bases__",     "__build_class__", "__builtins__", "__call__",
    "__class__",      "__closure__",   "__code__",        "__defaults__", "__delattr__",
    "__delitem__",    "__dict__",      "__func__",        "__getattr__",  "__getattribute__",
    "__getitem__",    "__globals__",   "__import__",      "__init__",     "__init_subclass__",
    "__kwdefaults__", "__loader__",    "__mro__",         "__new__",      "__objclass__",
    "__reduce__",     "__reduce_ex__", "__self__",        "__setattr__",  "__setitem__",
    "__setstate__",   "__spec__",      "__subclasses__",  "__wrapped__",
};

bool IsDangerousDunder(absl::string_view c) {
  return std::find(std::begin(kDangerousDunders), std::end(kDangerousDunders), c) !=
         std::end(kDangerousDunders);
}

}  // namespace internal

namespace {

using internal::IsDangerousDunder;
using internal::IsDunder;

using pickle::CallOp;
using pickle::CallSite;
using pickle::GlobalRef;
using pickle::Graph;
using pickle::Kind;
using pickle::Node;
using pickle::NodeId;
using pickle::PickleFacts;
using pickle::StreamFacts;
using pickle::Via;

using internal::kMaxSpecDepth;

int VerdictRank(v1::Verdict v) {
  switch (v) {
    case v1::VERDICT_SAFE:
      return 1;
    case v1::VERDICT_ERROR:
      return 2;
    case v1::VERDICT_SUSPICIOUS:
      return 3;
    case v1::VERDICT_DANGEROUS:
      return 4;
    default:
      return 0;
  }
}

// "exec", "nested_loader", ...: the lower-case enum name without its prefix.
std::string CategoryName(v1::Category c) {
  std::string name = v1::Category_Name(c);
  absl::string_view v(name);
  if (absl::ConsumePrefix(&v, "CATEGORY_")) name = std::string(v);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

std::string StripPrefix(std::string name, absl::string_view prefix) {
  absl::string_view v(name);
  if (absl::ConsumePrefix(&v, prefix)) return std::string(v);
  return name;
}

std::string ArgKindLabel(int k) {
  return StripPrefix(v1::ArgKind_Name(static_cast<v1::ArgKind>(k)), "ARG_");
}
std::string CallOpLabel(v1::CallOp op) { return StripPrefix(v1::CallOp_Name(op), "CALL_"); }

// The rules' CallOp for a VM call op; CALL_OP_UNSPECIFIED for non-call ops (BUILD, ...).
v1::CallOp ToRulesOp(CallOp op) {
  switch (op) {
    case CallOp::kReduce:
      return v1::CALL_REDUCE;
    case CallOp::kNewObj:
      return v1::CALL_NEWOBJ;
    case CallOp::kNewObjEx:
      return v1::CALL_NEWOBJ_EX;
    case CallOp::kObj:
      return v1::CALL_OBJ;
    case CallOp::kInst:
      return v1::CALL_INST;
    default:
      return v1::CALL_OP_UNSPECIFIED;
  }
}

}  // namespace

class RuleSet::Impl::Run {
 public:
  // Member names are arbitrary bytes (zip names); findings need valid UTF-8.
  Run(const Impl& rules, std::string_view member, const CallSummarizer* summarize)
      : rules_(rules),
        member_(internal::Sanitized(member, kMaxMemberBytes, /*escape_backslash=*/false)),
        summarize_(summarize != nullptr && *summarize ? summarize : nullptr) {}

  void Pickle(const PickleFacts& p, uint32_t index) {
    g_ = &p.graph;
    pickle_ = &p;
    pickle_index_ = index;
    int_tuple_cache_.clear();
    grades_.clear();
    const Graph& g = *g_;

    // Facts come from another process: check every id once. An inconsistent graph is one
    // scan.error; evaluation goes on (every access below is bounds-checked), without the call
    // renderings, which assume a consistent graph.
    consistent_ = true;
    if (std::optional<std::string> problem = internal::FindInconsistency(g)) {
      consistent_ = false;
      v1::Finding* f =
          Add("scan.error", v1::VERDICT_ERROR, v1::SEVERITY_MEDIUM, p.start, std::nullopt);
      if (f != nullptr) {
        f->set_category("other");
        SetMessage(f, absl::StrCat("inconsistent scan facts: ", *problem));
      }
    }

    // Allowlist decision per global, and the first call site that calls each (Finding.call).
    infos_.assign(g.globals.size(), GlobalInfo{});
    for (size_t gi = 0; gi < g.globals.size(); ++gi) {
      const GlobalRef& ref = g.globals[gi];
      if (ref.via != Via::kExt && ref.via != Via::kDynamic && !TooLong(ref)) {
        infos_[gi].allow = rules_.FindAllow(ref.resolved_module, ref.resolved_name);
      }
    }
    for (size_t ci = 0; ci < g.calls.size(); ++ci) {
      const CallSite& c = g.calls[ci];
      if (ToRulesOp(c.op) == v1::CALL_OP_UNSPECIFIED) continue;
      const Node* callee = internal::NodeAt(g, c.callee);
      if (callee == nullptr || callee->kind != Kind::kGlobal) continue;
      if (callee->ref < infos_.size() && infos_[callee->ref].first_call == kNone) {
        infos_[callee->ref].first_call = static_cast<uint32_t>(ci);
      }
    }

    // Globals and call sites merged by offset (globals first at equal offsets: INST).
    size_t gi = 0, ci = 0;
    while (gi < g.globals.size() || ci < g.calls.size()) {
      if (ci >= g.calls.size() ||
          (gi < g.globals.size() && g.globals[gi].offset <= g.calls[ci].offset)) {
        Global(static_cast<uint32_t>(gi++));
      } else {
        Call(g.calls[ci++]);
      }
    }
  }

  void Trailing(const StreamFacts& facts) {
    if (facts.trailing_bytes == 0) return;
    pickle_ = nullptr;
    pickle_index_ = facts.pickles.empty() ? 0 : static_cast<uint32_t>(facts.pickles.size() - 1);
    v1::Finding* f = Add("stream.trailing", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_LOW,
                         facts.trailing_offset, std::nullopt);
    if (f == nullptr) return;
    f->set_category("other");
    f->set_message(
        absl::StrCat(facts.trailing_bytes,
                     " bytes follow the last pickle's STOP and do not form another "
                     "pickle; a loader that keeps reading the stream could interpret them."));
  }

  Evaluation Finish() && {
    if (dropped_ > 0) {
      v1::Finding f;
      f.set_rule_id("scan.findings_truncated");
      f.set_severity(v1::SEVERITY_INFO);
      f.set_verdict(dropped_worst_);
      f.set_category("other");
      f.mutable_location()->set_member(member_);
      f.set_message(absl::StrCat(dropped_, " more findings were not kept (limit ",
                                 RuleSet::kMaxFindings, " per stream); the worst of them is ",
                                 v1::Verdict_Name(dropped_worst_), "."));
      out_.findings.push_back(std::move(f));
    }
    return std::move(out_);
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct GlobalInfo {
    const v1::AllowedGlobal* allow = nullptr;
    uint32_t first_call = kNone;
  };
  // How a non-allowlisted global grades, cached per distinct name within a pickle.
  struct Grade {
    DenyMatch deny;
    bool dunder = false;
    bool dangerous_dunder = false;
    std::string dunder_part;
  };
  // What produced a kCall node.
  struct Origin {
    bool broken = false;        // the facts reference something that does not exist
    bool named_global = false;  // the callee is a kGlobal
    uint32_t global = 0;
    const v1::AllowedGlobal* allow = nullptr;  // set when that global is allowlisted
  };

  // ---- findings

  // Counts the verdict, and returns a finding to fill or nullptr when kMaxFindings is reached.
  v1::Finding* Add(absl::string_view rule_id, v1::Verdict verdict, v1::Severity severity,
                   uint64_t offset, std::optional<uint8_t> opcode) {
    out_.verdict = WorseVerdict(out_.verdict, verdict);
    if (out_.findings.size() >= RuleSet::kMaxFindings) {
      ++dropped_;
      dropped_worst_ = WorseVerdict(dropped_worst_, verdict);
      return nullptr;
    }
    v1::Finding& f = out_.findings.emplace_back();
    f.set_rule_id(std::string(rule_id));
    f.set_verdict(verdict);
    f.set_severity(severity);
    v1::Location* loc = f.mutable_location();
    loc->set_member(member_);
    loc->set_offset(offset);
    if (opcode.has_value()) loc->set_opcode(internal::OpcodeName(*opcode));
    loc->set_pickle_index(pickle_index_);
    if (pickle_ != nullptr) loc->set_nested_depth(pickle_->depth);
    return &f;
  }

  // Message plus, for nested pickles, where the pickle came from.
  void SetMessage(v1::Finding* f, std::string message) const {
    if (pickle_ != nullptr && pickle_->depth > 0) {
      absl::StrAppend(&message, " (in a pickle nested ", pickle_->depth,
                      pickle_->depth == 1 ? " level" : " levels",
                      " deep, inside a byte string of pickle ", pickle_->parent, ")");
    }
    f->set_message(std::move(message));
  }

  // Finding.call: pickle::SummarizeCall's bounded rendering, made valid UTF-8.
  std::string Summary(const CallSite& c) const {
    if (!consistent_) return "";
    return internal::Sanitized(summarize_ != nullptr
                                   ? (*summarize_)(*g_, c)
                                   : pickle::SummarizeCall(*g_, c, internal::kMaxCallChars),
                               2 * internal::kMaxCallChars, /*escape_backslash=*/false);
  }
  std::string Rendered(NodeId id, size_t max_chars) const {
    if (!consistent_) return "<?>";
    return internal::Sanitized(pickle::Summarize(*g_, id, max_chars), 2 * max_chars,
                               /*escape_backslash=*/false);
  }

  // ---- globals

  static bool TooLong(const GlobalRef& ref) {
    return std::max({ref.module.size(), ref.name.size(), ref.resolved_module.size(),
                     ref.resolved_name.size()}) > RuleSet::kMaxGradedNameBytes;
  }

  // What a user who trusts a SUSPICIOUS global can do, appended to its message: the --allow
  // flag that trusts it (MODULE:QUALNAME when the qualname is dotted), and for nn.Module
  // classes the usual cause, a whole-model save. Empty for names that are not plain dotted
  // identifiers (nothing to copy into a command line).
  static std::string AllowHint(const GlobalRef& ref) {
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

  const Grade& GradeOf(const GlobalRef& ref) {
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

  void Global(uint32_t gi) {
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
      v1::Finding* f = Add("global.dynamic", v1::VERDICT_DANGEROUS, v1::SEVERITY_CRITICAL,
                           ref.offset, ref.opcode);
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
    if (info.allow != nullptr) return;

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
        SetMessage(
            f, absl::StrCat(name, written, " is denied (", category, ")", matched, ": ", e.why(),
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
        SetMessage(f, absl::StrCat(name, written, " reaches the dunder attribute ",
                                   internal::ShownName(grade.dunder_part),
                                   grade.dangerous_dunder
                                       ? ": an attribute chain into interpreter internals"
                                       : ": an attribute chain outside the allowlist"));
      }
    }
    if (!grade.deny && !grade.dunder) {
      v1::Finding* f = Add("global.unlisted", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM,
                           ref.offset, ref.opcode);
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

  // ---- call sites

  void Call(const CallSite& c) {
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
        Mutation(c, "call.append", "APPENDS", &v1::AllowedGlobal::append_target,
                 "an append target");
        return;
      case CallOp::kAddItems:
        Mutation(c, "call.append", "ADDITEMS", &v1::AllowedGlobal::append_target,
                 "an append target");
        return;
      case CallOp::kPersistentLoad:
        Persistent(c);
        return;
    }
    // An unknown operation: inconsistent facts, reported once per pickle.
  }

  Origin OriginOf(const Node& n) const {
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

  // A short description of a value for messages: "int", "global torch.float32",
  // "call of collections.OrderedDict".
  std::string Describe(NodeId id) const {
    const Node* n = internal::NodeAt(*g_, id);
    if (n == nullptr) return "<?>";
    if (n->kind == Kind::kGlobal) return absl::StrCat("global ", internal::GlobalName(*g_, *n));
    if (n->kind == Kind::kCall) {
      Origin o = OriginOf(*n);
      if (o.named_global) {
        return absl::StrCat("call of ", internal::GlobalName(g_->globals[o.global]));
      }
      return "call result";
    }
    return pickle::KindName(n->kind);
  }

  bool IsIntTuple(NodeId id, const Node& n) {
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

  // A call's result made with no arguments (or one empty list/tuple) that nothing mutates.
  bool IsEmptyCall(const Node& n) const {
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

  // Whether a value matches a spec: one of its kinds, with that kind's pins. Recurses into
  // tuple items and dict values only as deep as the spec nests (kMaxSpecDepth, validated).
  bool SpecMatches(NodeId id, const v1::ArgSpec& spec, int depth) {
    if (depth > kMaxSpecDepth) return false;
    for (int kind : spec.any_of()) {
      if (ArgMatches(id, kind, spec, depth)) return true;
    }
    return false;
  }

  static bool SizedCode(absl::string_view text, absl::string_view prefix) {
    if (!absl::StartsWith(text, prefix)) return false;
    const absl::string_view digits = text.substr(prefix.size());
    if (digits.empty() || digits.size() > 9) return false;
    return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  }

  bool EachMatches(const Node& n, const v1::ArgSpec& spec, int depth) {
    if (!spec.has_each()) return true;
    for (NodeId item : n.items) {
      if (!SpecMatches(item, spec.each(), depth + 1)) return false;
    }
    return true;
  }

  bool IntMatches(const Node& n, const v1::ArgSpec& spec) const {
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

  // A dict literal whose keys are all listed str keys with matching values, required ones
  // present. Every occurrence of a repeated key is checked (Python keeps the last one).
  bool DictMatches(const Node& n, const v1::ArgSpec& spec, int depth) {
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

  bool ArgMatches(NodeId id, int kind, const v1::ArgSpec& spec, int depth) {
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
        if (n->kind != Kind::kGlobal) return false;
        if (spec.global_values().empty()) return true;
        if (n->ref >= g_->globals.size()) return false;
        return NameIn(g_->globals[n->ref], spec);
      }
      default:
        return false;
    }
  }

  static bool NameIn(const GlobalRef& ref, const v1::ArgSpec& spec) {
    if (ref.via == Via::kExt || ref.via == Via::kDynamic) return false;
    const std::string name = absl::StrCat(ref.resolved_module, ".", ref.resolved_name);
    for (const std::string& v : spec.global_values()) {
      if (name == v) return true;
    }
    return false;
  }

  bool ShapeMatches(const v1::CallShape& s, v1::CallOp op, const std::vector<NodeId>& args,
                    bool has_kwargs) {
    if (s.op() != op) return false;
    if (args.size() < s.min_args() || args.size() > s.max_args()) return false;
    if (has_kwargs && !s.kwargs()) return false;
    for (size_t i = 0; i < args.size(); ++i) {
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

  // One spec as the messages show it: its kinds joined by '|', each with its pins.
  static std::string SpecText(const v1::ArgSpec& spec, int depth = 0) {
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

  static std::string ShapeText(const v1::CallShape& s) {
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

  std::string GotText(v1::CallOp op, const CallSite& c) const {
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

  void Invoke(const CallSite& c, v1::CallOp op) {
    const Node* callee = internal::NodeAt(*g_, c.callee);
    if (callee == nullptr) return;  // inconsistent facts, reported once per pickle
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
    if (ref.via == Via::kExt || ref.via == Via::kDynamic)
      return;  // the global's finding carries it
    const v1::AllowedGlobal* allowed = infos_[callee->ref].allow;
    if (allowed == nullptr) return;  // the global's own finding carries this call

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
      for (const v1::CallShape& s : allowed->calls()) {
        if (ShapeMatches(s, op, *items, has_kwargs)) {
          if (s.has_applies()) Applied(c, s, *items, 0);
          return;
        }
      }
    }

    const std::string name = internal::GlobalName(ref);
    if (allowed->calls().empty()) {
      ShapeFinding(c, name,
                   absl::StrCat(name, " is allowlisted as data only, but it is called: got ",
                                GotText(op, c)));
      return;
    }
    ShapeFinding(c, name,
                 absl::StrCat(name, " is allowlisted, but this call matches none of its shapes: ",
                              "expected ", ExpectedShapes(*allowed), ", got ", GotText(op, c)));
  }

  void ShapeFinding(const CallSite& c, const std::string& name, std::string message) {
    v1::Finding* f =
        Add("call.shape", v1::VERDICT_SUSPICIOUS, v1::SEVERITY_MEDIUM, c.offset, c.opcode);
    if (f == nullptr) return;
    f->set_category("other");
    f->set_global(name);
    f->set_call(Summary(c));
    SetMessage(f, std::move(message));
  }

  static std::string ExpectedShapes(const v1::AllowedGlobal& allowed) {
    if (allowed.calls().empty()) return "no call";
    std::vector<std::string> expected;
    for (const v1::CallShape& s : allowed.calls()) expected.push_back(ShapeText(s));
    return absl::StrJoin(expected, " or ");
  }

  // A call that calls one of its arguments with another (CallShape.applies): that inner call
  // must be a REDUCE its callee's entry allows, and so on for an inner call that applies too.
  void Applied(const CallSite& c, const v1::CallShape& shape, const std::vector<NodeId>& items,
               int depth) {
    const Node* func = internal::NodeAt(*g_, items[shape.applies().func()]);
    const Node* args = internal::NodeAt(*g_, items[shape.applies().args()]);
    // The shape matched: func is a global and args a tuple.
    if (func == nullptr || args == nullptr || func->ref >= g_->globals.size()) return;
    const GlobalRef& ref = g_->globals[func->ref];
    const v1::AllowedGlobal* allowed = infos_[func->ref].allow;
    if (allowed == nullptr) return;  // the global's own finding carries it
    if (depth < kMaxSpecDepth) {
      for (const v1::CallShape& s : allowed->calls()) {
        if (ShapeMatches(s, v1::CALL_REDUCE, args->items, false)) {
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

  void Build(const CallSite& c) {
    const Node* t = internal::NodeAt(*g_, c.callee);
    if (t == nullptr) return;  // inconsistent facts, reported once per pickle
    if (t->kind == Kind::kGlobal) {
      if (t->ref >= g_->globals.size()) return;  // inconsistent facts, reported once per pickle
      v1::Finding* f =
          Add("call.build", v1::VERDICT_DANGEROUS, v1::SEVERITY_HIGH, c.offset, c.opcode);
      if (f == nullptr) return;
      const std::string name = internal::GlobalName(*g_, *t);
      f->set_category("introspection");
      f->set_global(name);
      f->set_call(Summary(c));
      SetMessage(f, absl::StrCat("BUILD sets state on the global ", name,
                                 " itself (a class, function or module): setattr on shared "
                                 "code, the write primitive of attribute-chain gadgets"));
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

  // The item size numpy gives a dtype code it writes (numpy.dtype(code, False, True)); nullopt
  // for codes a structured field may not hold (objects) or that numpy does not write.
  static std::optional<absl::int128> NumpyItemBytes(absl::string_view code) {
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

  // The code of a numpy.dtype(code, ...) call result, or nullptr.
  const Node* DtypeCode(NodeId id) const {
    const Node* n = internal::NodeAt(*g_, id);
    if (n == nullptr || n->kind != Kind::kCall) return nullptr;
    Origin o = OriginOf(*n);
    if (o.broken || o.allow == nullptr) return nullptr;
    const GlobalRef& ref = g_->globals[o.global];
    if (ref.resolved_module != "numpy" || ref.resolved_name != "dtype") return nullptr;
    const Node* args = internal::NodeAt(*g_, g_->calls[n->ref].args);
    if (args == nullptr || args->kind != Kind::kTuple || args->items.empty()) return nullptr;
    const Node* code = internal::NodeAt(*g_, args->items[0]);
    return code != nullptr && code->kind == Kind::kStr && !code->truncated ? code : nullptr;
  }

  // BuildState.check: what the specs cannot say (see StateCheck in rules.proto).
  bool Checked(v1::StateCheck check, const std::vector<NodeId>& made_args, NodeId state_id,
               NodeId target) {
    switch (check) {
      case v1::STATE_CHECK_NUMPY_DTYPE:
        return NumpyDtypeState(made_args, state_id, target);
      case v1::STATE_CHECK_NUMPY_ARRAY:
        return NumpyArrayState(state_id);
      default:
        return true;
    }
  }

  // The field dtypes of a structured dtype state (fields dict values' first items).
  void FieldDtypes(const Node& state, std::vector<NodeId>* out) const {
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

  // Whether a dtype's fields, or theirs in turn (through every BUILD state each received),
  // lead back to `target`: numpy recurses through such a dtype (hash, repr, copy) until the C
  // stack overflows. Iterative, each node visited once.
  bool FieldsReach(const Node& state, NodeId target) const {
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

  // STATE_CHECK_NUMPY_ARRAY: (1, shape, dtype, is_fortran, data).
  bool NumpyArrayState(NodeId state_id) const {
    const Node* state = internal::NodeAt(*g_, state_id);
    if (state == nullptr || state->kind != Kind::kTuple || state->items.size() != 5) return false;
    const Node* shape = internal::NodeAt(*g_, state->items[1]);
    const Node* code = DtypeCode(state->items[2]);
    const Node* data = internal::NodeAt(*g_, state->items[4]);
    if (shape == nullptr || code == nullptr || data == nullptr) return false;
    const bool objects = code->text == "O8" || code->text == "O4";
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

  bool NumpyDtypeState(const std::vector<NodeId>& made_args, NodeId state_id, NodeId target) {
    const Node* state = internal::NodeAt(*g_, state_id);
    const Node* code = made_args.empty() ? nullptr : internal::NodeAt(*g_, made_args[0]);
    if (state == nullptr || state->kind != Kind::kTuple || state->items.size() < 8 ||
        code == nullptr || code->kind != Kind::kStr || code->truncated) {
      return false;
    }
    const Node* elsize = internal::NodeAt(*g_, state->items[5]);
    if (elsize == nullptr || elsize->kind != Kind::kInt || !elsize->fits || elsize->i < 0) {
      return false;
    }
    const std::optional<absl::int128> size = NumpyItemBytes(code->text);
    if (!size) return false;
    const bool sized =
        SizedCode(code->text, "S") || SizedCode(code->text, "U") || SizedCode(code->text, "V");
    if (sized && *size != elsize->i) return false;
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
      if (field_code == nullptr || offset == nullptr || offset->kind != Kind::kInt ||
          !offset->fits || offset->i < 0) {
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

  // A BUILD on an allowlisted build target whose entry pins its states: the state must match
  // one listed for the call that made the object (BuildState.made_with).
  void BuildState(const CallSite& c, const Node& target, const v1::AllowedGlobal& allowed,
                  const GlobalRef& ref) {
    if (allowed.build_states().empty()) return;
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
      if (SpecMatches(c.args, b.state(), 0) && Checked(b.check(), made_args, c.args, c.callee)) {
        return;
      }
      expected.push_back(SpecText(b.state()));
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

  void Mutation(const CallSite& c, absl::string_view rule_id, absl::string_view op_label,
                bool (v1::AllowedGlobal::*flag)() const, absl::string_view flag_label) {
    const Node* t = internal::NodeAt(*g_, c.callee);
    if (t == nullptr) return;  // inconsistent facts, reported once per pickle
    std::string what;
    v1::Severity severity = v1::SEVERITY_MEDIUM;
    std::string global;
    if (t->kind == Kind::kGlobal) {
      if (t->ref >= g_->globals.size()) return;  // inconsistent facts, reported once per pickle
      global = internal::GlobalName(*g_, *t);
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

  void Persistent(const CallSite& c) {
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

  static constexpr size_t kMaxMemberBytes = 4096;

  const Impl& rules_;
  const std::string member_;
  const CallSummarizer* summarize_;  // nullptr: pickle::SummarizeCall

  const Graph* g_ = nullptr;
  bool consistent_ = true;
  const PickleFacts* pickle_ = nullptr;  // nullptr outside a pickle (trailing bytes)
  uint32_t pickle_index_ = 0;
  std::vector<GlobalInfo> infos_;
  absl::flat_hash_map<NodeId, bool> int_tuple_cache_;
  absl::flat_hash_map<std::string, Grade> grades_;

  Evaluation out_;
  uint64_t dropped_ = 0;
  v1::Verdict dropped_worst_ = v1::VERDICT_SAFE;
};

Evaluation RuleSet::Evaluate(const StreamFacts& facts, std::string_view member) const {
  return Evaluate(facts, member, CallSummarizer());
}

Evaluation RuleSet::Evaluate(const StreamFacts& facts, std::string_view member,
                             const CallSummarizer& summarize) const {
  Impl::Run run(*impl_, member, &summarize);
  for (size_t i = 0; i < facts.pickles.size(); ++i) {
    run.Pickle(facts.pickles[i], static_cast<uint32_t>(i));
  }
  run.Trailing(facts);
  return std::move(run).Finish();
}

v1::Verdict WorseVerdict(v1::Verdict a, v1::Verdict b) {
  return VerdictRank(b) > VerdictRank(a) ? b : a;
}

}  // namespace ckptscan::rules
