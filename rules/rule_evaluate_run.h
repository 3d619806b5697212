// RuleSet::Impl::Run: the evaluation of one stream's facts (RuleSet::Evaluate), split by concern
// across the files that define its methods: rule_evaluate.cc (the walk, findings, the verdict),
// evaluate_globals.cc (grading globals), evaluate_calls.cc (call sites, persistent ids),
// evaluate_args.cc (argument specs and call shapes), evaluate_state.cc (BUILD states, numpy
// dtype and array states), evaluate_references.cc (getattr references). Internal to rules/:
// nothing outside includes it.
//
// Facts are not trusted: every id is checked before use. Thread-compatible: one Run per call.
#ifndef CKPTSCAN_RULES_RULE_EVALUATE_RUN_H_
#define CKPTSCAN_RULES_RULE_EVALUATE_RUN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/numeric/int128.h"
#include "absl/strings/string_view.h"
#include "rules/facts_view.h"
#include "rules/rule_set_internal.h"

namespace ckptscan::rules {

using internal::IsDangerousDunder;
using internal::IsDunder;
using internal::kMaxSpecDepth;
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

// Shared by the evaluation's files (rule_evaluate.cc defines them).
int VerdictRank(v1::Verdict v);
// "exec", "nested_loader", ...: the lower-case enum name without its prefix.
std::string CategoryName(v1::Category c);
std::string StripPrefix(std::string name, absl::string_view prefix);
std::string ArgKindLabel(int k);
std::string CallOpLabel(v1::CallOp op);
// The rules' CallOp for a VM call op; CALL_OP_UNSPECIFIED for non-call ops (BUILD, ...).
v1::CallOp ToRulesOp(pickle::CallOp op);

class RuleSet::Impl::Run {
 public:
  // Member names are arbitrary bytes (zip names); findings need valid UTF-8.
  Run(const Impl& rules, std::string_view member, const CallSummarizer* summarize)
      : rules_(rules),
        member_(internal::Sanitized(member, kMaxMemberBytes, /*escape_backslash=*/false)),
        summarize_(summarize != nullptr && *summarize ? summarize : nullptr) {}

  void Pickle(const PickleFacts& p, uint32_t index);

  void Trailing(const StreamFacts& facts);

  Evaluation Finish() &&;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct GlobalInfo {
    const v1::AllowedGlobal* allow = nullptr;
    uint32_t first_call = kNone;
    // builtins.getattr used only as the callee of references: they are judged instead.
    bool judged_by_references = false;
  };
  // A call builtins.getattr(G, 'NAME') read as the name G.NAME (see FindReferences).
  struct Reference {
    // The name as if imported: G's module, G's qualname + ".NAME" (written and resolved), G's
    // via; the call's offset and opcode.
    GlobalRef ref;
    const v1::AllowedGlobal* allow = nullptr;
    uint32_t first_call = kNone;  // the first call of its value
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
                   uint64_t offset, std::optional<uint8_t> opcode);

  // Message plus, for nested pickles, where the pickle came from.
  void SetMessage(v1::Finding* f, std::string message) const;

  // Finding.call: pickle::SummarizeCall's bounded rendering, made valid UTF-8.
  std::string Summary(const CallSite& c) const;
  std::string Rendered(NodeId id, size_t max_chars) const;

  // ---- globals

  static bool TooLong(const GlobalRef& ref);

  // What a user who trusts a SUSPICIOUS global can do, appended to its message: the --allow
  // flag that trusts it (MODULE:QUALNAME when the qualname is dotted), and for nn.Module
  // classes the usual cause, a whole-model save. Empty for names that are not plain dotted
  // identifiers (nothing to copy into a command line).
  static std::string AllowHint(const GlobalRef& ref);

  const Grade& GradeOf(const GlobalRef& ref);

  void Global(uint32_t gi);

  // ---- getattr references (evaluate_references.cc)

  // Fills references_ and GlobalInfo::judged_by_references for the pickle: a REDUCE of
  // builtins.getattr (or __builtin__.getattr) with exactly (G, 'NAME'), G a global imported by
  // name (GLOBAL/STACK_GLOBAL) and NAME a str literal that is not empty, does not start with '_'
  // and holds no '.', where neither G nor G.NAME is matched by a deny entry or has a dunder
  // component, is the import of G.NAME (protocol 4's find_class reads a dotted qualname the
  // same way). A getattr global whose every use is the callee of such a call is not graded
  // itself.
  void FindReferences();
  // The reference whose value `id` is, or nullptr.
  const Reference* ReferenceAt(NodeId id) const;
  // The name of the shared object `id` is: a global itself, or the attribute of one a reference
  // reads. "" for any other value (and for inconsistent facts).
  std::string SharedName(NodeId id) const;
  // The finding of a reference call: none when its name is allowlisted, else global.unlisted.
  void ReferenceFinding(const CallSite& c, const Reference& r);

  // ---- call sites

  // Graph::calls[ci].
  void Call(uint32_t ci);

  Origin OriginOf(const Node& n) const;

  // A short description of a value for messages: "int", "global torch.float32",
  // "call of collections.OrderedDict".
  std::string Describe(NodeId id) const;

  bool IsIntTuple(NodeId id, const Node& n);

  // A call's result made with no arguments (or one empty list/tuple) that nothing mutates.
  bool IsEmptyCall(const Node& n) const;

  // Whether a value matches a spec: one of its kinds, with that kind's pins. Recurses into
  // tuple items and dict values only as deep as the spec nests (kMaxSpecDepth, validated).
  bool SpecMatches(NodeId id, const v1::ArgSpec& spec, int depth);

  static bool SizedCode(absl::string_view text, absl::string_view prefix);

  bool EachMatches(const Node& n, const v1::ArgSpec& spec, int depth);

  bool IntMatches(const Node& n, const v1::ArgSpec& spec) const;

  // A dict literal whose keys are all listed str keys with matching values, required ones
  // present. Every occurrence of a repeated key is checked (Python keeps the last one).
  bool DictMatches(const Node& n, const v1::ArgSpec& spec, int depth);

  bool ArgMatches(NodeId id, int kind, const v1::ArgSpec& spec, int depth);

  static bool NameIn(const GlobalRef& ref, const v1::ArgSpec& spec);

  bool ShapeMatches(const v1::CallShape& s, v1::CallOp op, const std::vector<NodeId>& args,
                    bool has_kwargs);

  // One spec as the messages show it: its kinds joined by '|', each with its pins.
  static std::string SpecText(const v1::ArgSpec& spec, int depth = 0);

  static std::string ShapeText(const v1::CallShape& s);

  std::string GotText(v1::CallOp op, const CallSite& c) const;

  void Invoke(const CallSite& c, v1::CallOp op);

  // A call of the allowlisted global `ref` (or reference): one of its entry's shapes, else
  // call.shape.
  void AllowedCall(const CallSite& c, v1::CallOp op, const GlobalRef& ref,
                   const v1::AllowedGlobal& allowed);

  void ShapeFinding(const CallSite& c, const std::string& name, std::string message);

  // Whether `callee` with `args` is copyreg._reconstructor(C, builtins.object, None) for a class
  // C the user trusts (--allow, or a bare overlay entry: TrustAsAddSafeGlobals): protocol 0/1's
  // object.__new__(C), what NEWOBJ of C does at protocol 2, so trusting C covers it, and the
  // BUILD that follows as well.
  bool TrustedReconstruction(const GlobalRef& callee, const std::vector<NodeId>& args) const;

  static std::string ExpectedShapes(const v1::AllowedGlobal& allowed);

  // A call that calls one of its arguments with another (CallShape.applies): that inner call
  // must be a REDUCE its callee's entry allows, and so on for an inner call that applies too.
  void Applied(const CallSite& c, const v1::CallShape& shape, const std::vector<NodeId>& items,
               int depth);

  void Build(const CallSite& c);

  // The item size numpy gives a dtype code it writes (numpy.dtype(code, False, True)); nullopt
  // for codes a structured field may not hold (objects) or that numpy does not write.
  static std::optional<absl::int128> NumpyItemBytes(absl::string_view code);

  // The first argument of a numpy.dtype(code, ...) call result, or nullptr.
  const Node* DtypeArgument(NodeId id) const;

  // The code of a numpy.dtype(code, ...) call result, or nullptr.
  const Node* DtypeCode(NodeId id) const;

  // Whether `n` is the global numpy.record (any of its module names): the scalar type of a
  // record array's structured dtype, numpy.dtype(numpy.record, ...).
  bool IsRecordType(const Node* n) const;

  // BuildState.check: what the specs cannot say (see StateCheck in rules.proto).
  bool Checked(v1::StateCheck check, const std::vector<NodeId>& made_args, NodeId state_id,
               NodeId target);

  // The field dtypes of a structured dtype state (fields dict values' first items).
  void FieldDtypes(const Node& state, std::vector<NodeId>* out) const;

  // Whether a dtype's fields, or theirs in turn (through every BUILD state each received),
  // lead back to `target`: numpy recurses through such a dtype (hash, repr, copy) until the C
  // stack overflows. Iterative, each node visited once.
  bool FieldsReach(const Node& state, NodeId target) const;

  // STATE_CHECK_NUMPY_ARRAY: (1, shape, dtype, is_fortran, data).
  bool NumpyArrayState(NodeId state_id) const;

  bool NumpyDtypeState(const std::vector<NodeId>& made_args, NodeId state_id, NodeId target);

  // A BUILD on an allowlisted build target whose entry pins its states: the state must match
  // one listed for the call that made the object (BuildState.made_with).
  void BuildState(const CallSite& c, const Node& target, const v1::AllowedGlobal& allowed,
                  const GlobalRef& ref);

  void Mutation(const CallSite& c, absl::string_view rule_id, absl::string_view op_label,
                bool (v1::AllowedGlobal::*flag)() const, absl::string_view flag_label);

  void Persistent(const CallSite& c);

  // ---- cost bounds (evaluate_cost.cc)

  // A bound a matched value passes: reported as call.cost when its call or BUILD matches.
  struct CostHit {
    int arg = -1;       // the argument's position; -1 for a BUILD state
    std::string what;   // "an int of up to 1048584 bits"
    std::string field;  // the rules field: "max_int_bits"
    std::string bound;  // its value
    std::string why;    // what the loader would do with it
  };

  // Records in cost_hits_ the bounds of `spec` that `n`, matched as `kind`, passes.
  void CheckCost(const Node& n, int kind, const v1::ArgSpec& spec);
  void NumberTextCost(const Node& n, const v1::NumberText& bounds);
  // CallShape.check over a matched call's arguments.
  void CallCheckCost(v1::CallCheck check, const std::vector<NodeId>& args);
  // call.cost for the first of cost_hits_, if any.
  void CostFinding(const CallSite& c, const std::string& name);
  // Bytes of str/bytes and items of containers in a value and, one level down, in its items.
  uint64_t ArgumentUnits(NodeId id, int depth) const;
  // Adds a matched call's (or BUILD's) argument units to the pickle's count, and reports once
  // per pickle when the count passes RuleSet.cost_budget.
  void CountArguments(const CallSite& c);
  static uint64_t SaturatingAdd(uint64_t a, uint64_t b);

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
  std::vector<CostHit> cost_hits_;  // of the shape or state being matched
  int arg_index_ = -1;              // the argument being matched (-1: a BUILD state)
  uint64_t argument_units_ = 0;     // CountArguments, per pickle
  bool budget_reported_ = false;
  absl::flat_hash_map<std::string, Grade> grades_;
  absl::flat_hash_map<uint32_t, Reference> references_;  // by call index, per pickle

  Evaluation out_;
  uint64_t dropped_ = 0;
  v1::Verdict dropped_worst_ = v1::VERDICT_SAFE;
};

}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_RULE_EVALUATE_RUN_H_
