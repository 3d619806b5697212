// Evaluation: RuleSet::Evaluate turns a stream's VM facts into findings and a verdict.
// RuleSet::Impl::Run (rule_evaluate_run.h) walks each pickle's globals and call sites in stream
// order: it grades globals (allowlist, deny entries, dunders), matches calls against the allowed
// call shapes and argument specs, checks BUILD states and persistent ids, and caps the findings
// it keeps. This file: the walk, the findings, the verdict.
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

v1::Finding* RuleSet::Impl::Run::Add(absl::string_view rule_id, v1::Verdict verdict,
                                     v1::Severity severity, uint64_t offset,
                                     std::optional<uint8_t> opcode) {
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

void RuleSet::Impl::Run::SetMessage(v1::Finding* f, std::string message) const {
  if (pickle_ != nullptr && pickle_->depth > 0) {
    absl::StrAppend(&message, " (in a pickle nested ", pickle_->depth,
                    pickle_->depth == 1 ? " level" : " levels",
                    " deep, inside a byte string of pickle ", pickle_->parent, ")");
  }
  f->set_message(std::move(message));
}

std::string RuleSet::Impl::Run::Summary(const CallSite& c) const {
  if (!consistent_) return "";
  return internal::Sanitized(summarize_ != nullptr
                                 ? (*summarize_)(*g_, c)
                                 : pickle::SummarizeCall(*g_, c, internal::kMaxCallChars),
                             2 * internal::kMaxCallChars, /*escape_backslash=*/false);
}

std::string RuleSet::Impl::Run::Rendered(NodeId id, size_t max_chars) const {
  if (!consistent_) return "<?>";
  return internal::Sanitized(pickle::Summarize(*g_, id, max_chars), 2 * max_chars,
                             /*escape_backslash=*/false);
}

void RuleSet::Impl::Run::Pickle(const PickleFacts& p, uint32_t index) {
  g_ = &p.graph;
  pickle_ = &p;
  pickle_index_ = index;
  int_tuple_cache_.clear();
  grades_.clear();
  argument_units_ = 0;
  budget_reported_ = false;
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
  FindReferences();

  // Globals and call sites merged by offset (globals first at equal offsets: INST).
  size_t gi = 0, ci = 0;
  while (gi < g.globals.size() || ci < g.calls.size()) {
    if (ci >= g.calls.size() ||
        (gi < g.globals.size() && g.globals[gi].offset <= g.calls[ci].offset)) {
      Global(static_cast<uint32_t>(gi++));
    } else {
      Call(static_cast<uint32_t>(ci++));
    }
  }
}

void RuleSet::Impl::Run::Trailing(const StreamFacts& facts) {
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

Evaluation RuleSet::Impl::Run::Finish() && {
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
