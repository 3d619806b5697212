// Internal to core/jinja: the abstract evaluator behind Analyze (analyzer.h). evaluator.cc runs
// statements and expressions on an explicit task stack; builtins.cc gives attributes, items,
// filters, tests, methods and operators their meaning over abstract values.
#ifndef CKPTSCAN_CORE_JINJA_EVALUATOR_H_
#define CKPTSCAN_CORE_JINJA_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/jinja/analyzer.h"
#include "core/jinja/ast.h"
#include "core/jinja/limits.h"
#include "core/jinja/values.h"

namespace ckptscan::jinja {

// How an attribute or item is reached: jinja2's getattr (`x.name`), getitem (`x[key]`), the
// attr filter (its own lookup: the one CVE-2025-27516 is about), or the attribute getter of
// map/selectattr/rejectattr/groupby/sum/sort/unique/min/max/join (getitem per dotted part).
enum class Via : uint8_t { kAttr, kItem, kAttrFilter, kAttrGetter };

// Positional and keyword arguments of a call, filter or test.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  std::optional<Value> star;      // *args
  std::optional<Value> starstar;  // **kwargs
  const Value* Kw(std::string_view name) const {
    for (const auto& [k, v] : kw) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

// What iterating a value gives: the exact elements when they are known, else their summary.
struct Elements {
  bool exact = false;
  std::vector<Value> items;  // exact
  Value element;             // the join of every element (also set when exact)
};

class Evaluator final {
 public:
  Evaluator(std::string_view text, const Tree& tree, const Limits& limits)
      : text_(text), tree_(tree), limits_(limits) {}
  absl::StatusOr<Analysis> Run();

 private:
  // ---- state ------------------------------------------------------------------------------
  struct Scope {
    std::map<std::string, Value> vars;
    bool operator==(const Scope&) const = default;
  };
  struct State {
    std::vector<Scope> scopes;                                 // [0]: the template's
    std::map<uint32_t, std::map<std::string, Value>> ns;       // namespace attributes by site
    std::vector<Value> captures;                               // output being captured
    bool dead = false;                                         // this path stopped rendering
    bool operator==(const State&) const = default;
  };
  State Join(const State& a, const State& b);
  State Widen(const State& a, const State& b);
  Value Lookup(const State& s, const std::string& name, size_t below) const;
  Value Lookup(const std::string& name) const { return Lookup(st_, name, st_.scopes.size()); }
  void Bind(uint32_t target, const Value& v);
  void Emit(const Value& v);

  // ---- tasks --------------------------------------------------------------------------------
  enum class TaskKind : uint8_t { kExpr, kStmts, kStmt, kFor, kInvoke, kIf, kUncalled };
  struct Task {
    TaskKind kind;
    uint32_t node = kNoNode;
    uint32_t step = 0;
    uint32_t index = 0;
    uint32_t aux = 0;        // kStmts: which list; kInvoke: the pending call; kFor: loop slot
    size_t vbase = 0;        // value stack height when the task started
    bool callee = false;     // kExpr: the callee of a call (str.format called directly)
  };
  absl::Status Step();
  absl::Status StepExpr(Task& t);
  absl::Status StepStmt(Task& t);
  absl::Status StepIf(Task& t);
  absl::Status StepFor(Task& t);
  absl::Status StepInvoke(Task& t);
  void PushExpr(uint32_t node, bool callee = false);
  void PushStmts(uint32_t node, int which);
  Value PopValue();

  // A call of a macro, a caller or a recursive loop, waiting for its body.
  struct Pending {
    uint32_t obj = 0;       // the macro, caller or loop object
    uint32_t node = kNoNode;  // the call expression
    Args args;
    size_t saved = 0;       // the caller's state in saved_
    std::string memo;       // the memo key
    size_t param = 0;       // next parameter to bind
  };
  // A for loop being iterated.
  struct Loop {
    Elements elements;
    bool unroll = false;
    bool recursive_call = false;  // loop(...) of a recursive loop: output is the value
    uint32_t k = 0;           // unrolled: the iteration; summary: the round
    size_t pre = 0;           // saved_: the state before the loop
    size_t in = 0;            // saved_: the state an iteration starts from (summary)
    std::vector<State> breaks, continues;
    std::optional<State> skipped;  // an iteration the loop's test may skip
    bool may_be_empty = true;
  };
  bool ExpandCall(uint32_t node, const Value& callee, const Args& args, size_t base);

  // ---- findings ----------------------------------------------------------------------------
  void Report(uint32_t offset, uint8_t envs, Severity severity, std::string_view construct,
              std::string message);
  std::string Path(uint32_t node) const;

  // ---- builtins.cc --------------------------------------------------------------------------
 public:
  // Reaching `key` on `receiver` (node: the expression, for the finding).
  Value Access(const Value& receiver, const Value& key, Via via, uint32_t node, bool called);
  Value AccessName(const Value& receiver, const std::string& name, Via via, uint32_t node,
                   bool called);
  Value AttrGetter(const Value& item, const Value& attribute, uint32_t node);
  Value Call(const Value& callee, const Args& args, uint32_t node);
  Value Filter(const std::string& name, const Value& input, const Args& args, uint32_t node);
  Value Test(const std::string& name, const Value& input, const Args& args, uint32_t node);
  Value Method(const HeapObj& method, const Args& args, uint32_t node);
  Value BinOp(Tok op, const Value& a, const Value& b);
  Value Concat(const Value& a, const Value& b);
  Value ToStr(const Value& v);
  Value Slice(const Value& v, const Value& start, const Value& stop, const Value& step);
  Value Index(const Value& v, const Value& key);
  Elements Iterate(const Value& v);
  std::optional<bool> Truth(const Value& v) const;
  Value ValueJoin(const Value& a, const Value& b) { return jinja::Join(a, b, heap_); }
  Heap& heap() { return heap_; }
  uint64_t max_string_bytes() const { return limits_.max_string_bytes; }
  Value NewNamespace(uint32_t node, const Args& args);
  Value ContextValue(const std::string& name) const;

 private:
  Value StrOp(const Value& recv, std::string_view method, const Args& args, uint32_t node);
  Value MapStrings(const Value& v, Origin unfolded,
                   const std::function<std::optional<std::string>(const std::string&)>& f);
  void Mutate(const Value& container, const Value& added);
  Value AttrValue(const Value& receiver, const std::string& name, Via via, uint32_t node,
                  bool called);

  std::string_view text_;
  const Tree& tree_;
  const Limits& limits_;
  mutable Heap heap_;  // interned on lookups too
  State st_;
  std::vector<State> saved_;
  std::vector<Value> vals_;
  std::vector<Task> tasks_;
  std::vector<Pending> pending_;
  std::vector<Loop> loops_;          // open for loops
  std::vector<size_t> loop_frames_;  // loops_ index per function frame boundary
  std::map<std::string, std::pair<Value, std::map<uint32_t, std::map<std::string, Value>>>>
      memo_;
  std::set<std::string> in_progress_;
  std::set<uint32_t> invoked_;       // macro and call-block nodes whose body ran
  std::vector<uint32_t> defined_;    // macro objects defined, in order
  std::map<std::tuple<uint32_t, std::string, Severity>, Finding> findings_;
  std::set<std::string> names_;
  bool unresolved_ = false;
  uint64_t steps_ = 0;
  uint64_t unrolled_ = 0;
  uint32_t depth_ = 0;  // macro and caller bodies open
  uint32_t injected_ = kNoNode;  // a filter block's or set block's filter: its input
  Value injected_value_;
};

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_EVALUATOR_H_
