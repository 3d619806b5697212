#include "core/jinja/parser.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/limit_status.h"
#include "base/strings.h"

namespace ckptscan::jinja {
namespace {

constexpr std::array<std::string_view, 54> kFilters = {
    "abs",      "attr",      "batch",   "capitalize", "center",    "count",
    "d",        "default",   "dictsort", "e",         "escape",    "filesizeformat",
    "first",    "float",     "forceescape", "format", "groupby",   "indent",
    "int",      "items",     "join",    "last",       "length",    "list",
    "lower",    "map",       "max",     "min",        "pprint",    "random",
    "reject",   "rejectattr", "replace", "reverse",   "round",     "safe",
    "select",   "selectattr", "slice",  "sort",       "string",    "striptags",
    "sum",      "title",     "tojson",  "trim",       "truncate",  "unique",
    "upper",    "urlencode", "urlize",  "wordcount",  "wordwrap",  "xmlattr"};
constexpr std::array<std::string_view, 39> kTests = {
    "!=",       "<",         "<=",      "==",       ">",          ">=",       "boolean",
    "callable", "defined",   "divisibleby", "eq",   "equalto",    "escaped",  "even",
    "false",    "filter",    "float",   "ge",       "greaterthan", "gt",      "in",
    "integer",  "iterable",  "le",      "lessthan", "lower",      "lt",       "mapping",
    "ne",       "none",      "number",  "odd",      "sameas",     "sequence", "string",
    "test",     "true",      "undefined", "upper"};

// Python's keyword.kwlist: a keyword argument named so is passed through a dict.
constexpr std::array<std::string_view, 35> kPythonKeywords = {
    "False", "None",   "True",  "and",      "as",     "assert", "async", "await",  "break",
    "class", "continue", "def", "del",      "elif",   "else",   "except", "finally", "for",
    "from",  "global", "if",    "import",   "in",     "is",     "lambda", "nonlocal", "not",
    "or",    "pass",   "raise", "return",   "try",    "while",  "with",   "yield"};

// Python refuses more nested blocks than this in one function (CO_MAXBLOCKS).
constexpr int kMaxPythonBlocks = 20;

template <size_t N>
bool In(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// An expression procedure of jinja2.parser.Parser, run on an explicit stack.
enum class Proc : uint8_t {
  kCondExpr,
  kOr,
  kAnd,
  kNot,
  kCompare,
  kMath1,
  kConcat,
  kMath2,
  kPow,
  kUnary,
  kPrimary,
  kTuple,
  kList,
  kDict,
  kPostfix,
  kFilterExpr,
  kSubscript,
  kSubscribed,
  kCallArgs,
  kFilter,
  kTest,
};

// What a parse_tuple call may end at besides ")", "}}" and "%}" (extra_end_rules).
enum class EndRule : uint8_t { kNone, kIn, kRecursive };

struct Frame {
  Proc proc = Proc::kCondExpr;
  uint8_t state = 0;
  bool flag = false;   // kUnary: with_filter; kTuple: explicit parentheses; kFilter: inline;
                       // kTest: negated; kCallArgs: require_comma; kPrimary: with_namespace
  bool flag2 = false;  // kTuple: simplified; kTuple: is_tuple (flag3)
  bool flag3 = false;  // kTuple: with_condexpr
  bool flag4 = false;  // kTuple: is_tuple
  EndRule end = EndRule::kNone;
  Tok op = Tok::kEof;
  CompareOp cmp = CompareOp::kEq;
  uint32_t node = kNoNode;
  uint32_t aux = kNoNode;
  uint32_t start = 0;
  std::string key;
  std::vector<uint32_t> items;
};

// A statement whose body is being read (parse_statements), or the template itself.
struct Body {
  uint32_t owner = 0;      // the statement node (0: the template)
  uint32_t root_if = 0;    // for an elif body: the first If
  int which = 0;           // 0: list, 1: list2 (for's else), 2: list3 (if's else)
  std::vector<std::string_view> end;  // the tag names that end the body
  std::vector<uint32_t> buffer;        // data and expressions not yet in an Output
  uint32_t loop_stores = 0;  // for a for loop: Names "loop" stored before it
};

class Parser {
 public:
  Parser(Lexed lexed, const Limits& limits) : lexed_(std::move(lexed)), limits_(limits) {
    toks_ = &lexed_.tokens;
    if (lexed_.problem.has_value()) {
      Token sentinel;
      sentinel.type = Tok::kEof;
      sentinel.offset = lexed_.problem->offset;
      sentinel.end = sentinel.offset;
      lexed_.tokens.push_back(std::move(sentinel));
      sentinel_ = lexed_.tokens.size() - 1;
    }
  }

  absl::StatusOr<Parsed> Run() {
    tree_.nodes.reserve(std::min<size_t>(toks_->size() + 1, limits_.max_nodes));
    absl::Status s = NewNode(NodeKind::kTemplate, 0).status();
    if (s.ok() && pos_ == sentinel_) LexFail();
    if (s.ok()) s = Statements();
    if (s.ok() && !problem_.has_value()) s = Validate();
    if (!s.ok()) return s;
    Parsed out;
    out.problem = std::move(problem_);
    out.tree = std::move(tree_);
    return out;
  }

 private:
  // ---- tokens -------------------------------------------------------------------------

  const Token& Cur() const { return (*toks_)[pos_]; }
  const Token& Look() {
    const size_t i = std::min(pos_ + 1, toks_->size() - 1);
    if (i == sentinel_) LexFail();
    return (*toks_)[i];
  }
  // Advances; returns the token that was current.
  const Token& Next() {
    const Token& t = (*toks_)[pos_];
    if (pos_ + 1 < toks_->size() && t.type != Tok::kEof) {
      last_end_ = t.end;
      ++pos_;
      if (pos_ == sentinel_) LexFail();
    }
    return t;
  }
  bool Is(Tok t) const { return Cur().type == t; }
  bool IsName(std::string_view v) const { return Cur().type == Tok::kName && Cur().text == v; }
  bool SkipName(std::string_view v) {
    if (!IsName(v)) return false;
    Next();
    return true;
  }
  bool Skip(Tok t) {
    if (!Is(t)) return false;
    Next();
    return true;
  }

  std::string Describe(const Token& t) const {
    return t.type == Tok::kName ? t.text : std::string(TokName(t.type));
  }
  void LexFail() {
    if (!problem_.has_value()) problem_ = lexed_.problem;
  }
  void Fail(std::string message) { FailAt(Cur().offset, std::move(message)); }
  void FailAt(uint32_t offset, std::string message) {
    if (!problem_.has_value()) problem_ = Problem{offset, std::move(message), false};
  }
  bool Expect(Tok t) {
    if (problem_.has_value()) return false;
    if (Is(t)) {
      Next();
      return true;
    }
    if (Is(Tok::kEof)) {
      Fail(absl::StrCat("unexpected end of template, expected '", base::AbslView(TokName(t)), "'."));
    } else {
      Fail(absl::StrCat("expected token '", base::AbslView(TokName(t)), "', got '", Describe(Cur()), "'"));
    }
    return false;
  }
  bool ExpectName(std::string_view v) {
    if (problem_.has_value()) return false;
    if (IsName(v)) {
      Next();
      return true;
    }
    if (Is(Tok::kEof)) {
      Fail(absl::StrCat("unexpected end of template, expected '", base::AbslView(v), "'."));
    } else {
      Fail(absl::StrCat("expected token '", base::AbslView(v), "', got '", Describe(Cur()), "'"));
    }
    return false;
  }
  // expect("name"): the name, or nullopt (problem set).
  std::optional<std::string> ExpectAnyName() {
    if (problem_.has_value()) return std::nullopt;
    if (Is(Tok::kName)) return Next().text;
    if (Is(Tok::kEof)) {
      Fail("unexpected end of template, expected 'name'.");
    } else {
      Fail(absl::StrCat("expected token 'name', got '", Describe(Cur()), "'"));
    }
    return std::nullopt;
  }

  // ---- nodes --------------------------------------------------------------------------

  absl::StatusOr<uint32_t> NewNode(NodeKind kind, uint32_t offset) {
    if (tree_.nodes.size() >= limits_.max_nodes) {
      return base::LimitError(
          absl::StrCat("a template of more than ", limits_.max_nodes, " syntax nodes (max_template_nodes)"),
          "max_template_nodes", limits_.max_nodes);
    }
    Node n;
    n.kind = kind;
    n.offset = offset;
    n.end = offset;
    tree_.nodes.push_back(std::move(n));
    return static_cast<uint32_t>(tree_.nodes.size() - 1);
  }
  Node& N(uint32_t i) { return tree_.nodes[i]; }

  // ---- expressions --------------------------------------------------------------------

  absl::Status Push(Frame f) {
    if (stack_.size() >= limits_.max_nesting * 16) {
      return base::LimitError(
          absl::StrCat("an expression nested more than ", limits_.max_nesting, " deep"),
          "max_nesting", limits_.max_nesting);
    }
    f.start = Cur().offset;
    stack_.push_back(std::move(f));
    return absl::OkStatus();
  }
  static Frame F(Proc p) {
    Frame f;
    f.proc = p;
    return f;
  }

  // Jinja's is_tuple_end (3.1.2 and 3.1.6) passes its extra_end_rules tuple to
  // Token.test_any(*iterable) as one argument, so a rule never matches: after a comma,
  // `{% for m, in x %}` parses `in` as a second target (and fails at `x`), and
  // `{% for m in a, recursive %}` loops over the tuple (a, recursive). The rule is kept in
  // the frames (it names what Jinja meant) but, as in Jinja, ends nothing.
  bool IsTupleEnd(EndRule) const {
    return Is(Tok::kVariableEnd) || Is(Tok::kBlockEnd) || Is(Tok::kRParen);
  }

  // Runs `first` to completion; *out gets its node (kNoNode when a problem was found).
  absl::Status Run(Frame first, uint32_t* out) {
    *out = kNoNode;
    stack_.clear();
    absl::Status s = Push(std::move(first));
    while (s.ok() && !stack_.empty() && !problem_.has_value()) s = Step();
    if (!s.ok()) return s;
    if (!problem_.has_value()) *out = ret_;
    stack_.clear();
    return absl::OkStatus();
  }

  // Finishes the top frame with `node`.
  void Return(uint32_t node) {
    if (node != kNoNode && N(node).end < last_end_) N(node).end = last_end_;
    ret_ = node;
    stack_.pop_back();
  }

  absl::StatusOr<uint32_t> Make(NodeKind kind, uint32_t offset, uint32_t a = kNoNode,
                                uint32_t b = kNoNode, uint32_t c = kNoNode) {
    absl::StatusOr<uint32_t> n = NewNode(kind, offset);
    if (!n.ok()) return n;
    N(*n).a = a;
    N(*n).b = b;
    N(*n).c = c;
    N(*n).end = last_end_;
    return n;
  }

#define CKPT_MAKE(var, ...)                                  \
  absl::StatusOr<uint32_t> var##_or = Make(__VA_ARGS__);     \
  if (!var##_or.ok()) return var##_or.status();              \
  const uint32_t var = *var##_or

  absl::Status Step() {
    Frame& f = stack_.back();
    switch (f.proc) {
      case Proc::kCondExpr:
        return CondExpr(f);
      case Proc::kOr:
      case Proc::kAnd:
        return AndOr(f);
      case Proc::kNot:
        return Not(f);
      case Proc::kCompare:
        return Compare(f);
      case Proc::kMath1:
      case Proc::kMath2:
      case Proc::kPow:
        return Math(f);
      case Proc::kConcat:
        return Concat(f);
      case Proc::kUnary:
        return Unary(f);
      case Proc::kPrimary:
        return Primary(f);
      case Proc::kTuple:
        return TupleStep(f);
      case Proc::kList:
        return ListStep(f);
      case Proc::kDict:
        return DictStep(f);
      case Proc::kPostfix:
        return Postfix(f);
      case Proc::kFilterExpr:
        return FilterExpr(f);
      case Proc::kSubscript:
        return Subscript(f);
      case Proc::kSubscribed:
        return Subscribed(f);
      case Proc::kCallArgs:
        return CallArgs(f);
      case Proc::kFilter:
        return FilterStep(f);
      case Proc::kTest:
        return TestStep(f);
    }
    return absl::OkStatus();
  }

  absl::Status CondExpr(Frame& f) {
    switch (f.state) {
      case 0:
        f.state = 1;
        return Push(F(Proc::kOr));
      case 1:
        f.node = ret_;
        [[fallthrough]];
      case 2:
        if (SkipName("if")) {
          f.state = 3;
          return Push(F(Proc::kOr));
        }
        Return(f.node);
        return absl::OkStatus();
      case 3:
        f.aux = ret_;
        if (SkipName("else")) {
          f.state = 4;
          return Push(F(Proc::kCondExpr));
        }
        {
          CKPT_MAKE(n, NodeKind::kCondExpr, f.start, f.aux, f.node, kNoNode);
          f.node = n;
        }
        f.state = 2;
        return absl::OkStatus();
      case 4: {
        CKPT_MAKE(n, NodeKind::kCondExpr, f.start, f.aux, f.node, ret_);
        f.node = n;
        f.state = 2;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status AndOr(Frame& f) {
    const bool is_or = f.proc == Proc::kOr;
    const Proc sub = is_or ? Proc::kAnd : Proc::kNot;
    switch (f.state) {
      case 0:
        f.state = 1;
        return Push(F(sub));
      case 1:
        f.node = ret_;
        f.state = 2;
        [[fallthrough]];
      case 2:
        if (SkipName(is_or ? "or" : "and")) {
          f.state = 3;
          return Push(F(sub));
        }
        Return(f.node);
        return absl::OkStatus();
      case 3: {
        CKPT_MAKE(n, is_or ? NodeKind::kOr : NodeKind::kAnd, f.start, f.node, ret_);
        f.node = n;
        f.state = 2;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status Not(Frame& f) {
    if (f.state == 0) {
      if (IsName("not")) {
        Next();
        f.state = 1;
        return Push(F(Proc::kNot));
      }
      f.proc = Proc::kCompare;  // tail call
      return absl::OkStatus();
    }
    CKPT_MAKE(n, NodeKind::kNot, f.start, ret_);
    Return(n);
    return absl::OkStatus();
  }

  absl::Status Compare(Frame& f) {
    switch (f.state) {
      case 0:
        f.state = 1;
        return Push(F(Proc::kMath1));
      case 1:
        f.node = ret_;
        f.state = 2;
        [[fallthrough]];
      case 2: {
        const Tok t = Cur().type;
        CompareOp op;
        if (t == Tok::kEq || t == Tok::kNe || t == Tok::kLt || t == Tok::kLtEq ||
            t == Tok::kGt || t == Tok::kGtEq) {
          op = t == Tok::kEq     ? CompareOp::kEq
               : t == Tok::kNe   ? CompareOp::kNe
               : t == Tok::kLt   ? CompareOp::kLt
               : t == Tok::kLtEq ? CompareOp::kLtEq
               : t == Tok::kGt   ? CompareOp::kGt
                                 : CompareOp::kGtEq;
          Next();
        } else if (SkipName("in")) {
          op = CompareOp::kIn;
        } else if (IsName("not") && Look().type == Tok::kName && Look().text == "in") {
          Next();
          Next();
          op = CompareOp::kNotIn;
        } else {
          if (f.items.empty()) {
            Return(f.node);
            return absl::OkStatus();
          }
          CKPT_MAKE(n, NodeKind::kCompare, f.start, f.node);
          N(n).list = std::move(f.items);
          Return(n);
          return absl::OkStatus();
        }
        f.cmp = op;
        f.state = 3;
        return Push(F(Proc::kMath1));
      }
      case 3: {
        CKPT_MAKE(n, NodeKind::kOperand, N(ret_).offset, ret_);
        N(n).cmp = f.cmp;
        f.items.push_back(n);
        f.state = 2;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status Math(Frame& f) {
    const auto sub = [&]() {
      if (f.proc == Proc::kMath1) return F(Proc::kConcat);
      if (f.proc == Proc::kMath2) return F(Proc::kPow);
      Frame u = F(Proc::kUnary);
      u.flag = true;
      return u;
    };
    const auto is_op = [&](Tok t) {
      if (f.proc == Proc::kMath1) return t == Tok::kAdd || t == Tok::kSub;
      if (f.proc == Proc::kMath2) {
        return t == Tok::kMul || t == Tok::kDiv || t == Tok::kFloorDiv || t == Tok::kMod;
      }
      return t == Tok::kPow;
    };
    switch (f.state) {
      case 0:
        f.state = 1;
        return Push(sub());
      case 1:
        f.node = ret_;
        f.state = 2;
        [[fallthrough]];
      case 2:
        if (is_op(Cur().type)) {
          f.op = Next().type;
          f.state = 3;
          return Push(sub());
        }
        Return(f.node);
        return absl::OkStatus();
      case 3: {
        CKPT_MAKE(n, NodeKind::kBinOp, f.start, f.node, ret_);
        N(n).op = f.op;
        f.node = n;
        f.state = 2;
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status Concat(Frame& f) {
    switch (f.state) {
      case 0:
        f.state = 1;
        return Push(F(Proc::kMath2));
      case 1:
      case 3:
        f.items.push_back(ret_);
        if (Skip(Tok::kTilde)) {
          f.state = 3;
          return Push(F(Proc::kMath2));
        }
        if (f.items.size() == 1) {
          Return(f.items[0]);
          return absl::OkStatus();
        }
        {
          CKPT_MAKE(n, NodeKind::kConcat, f.start);
          N(n).list = std::move(f.items);
          Return(n);
        }
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Unary(Frame& f) {
    switch (f.state) {
      case 0:
        if (Is(Tok::kSub) || Is(Tok::kAdd)) {
          f.op = Next().type;
          f.state = 1;
          return Push(F(Proc::kUnary));  // with_filter=False
        }
        f.state = 2;
        return Push(F(Proc::kPrimary));
      case 1: {
        CKPT_MAKE(n, f.op == Tok::kSub ? NodeKind::kNeg : NodeKind::kPos, f.start, ret_);
        ret_ = n;
      }
        [[fallthrough]];
      case 2: {
        f.state = 3;
        Frame p = F(Proc::kPostfix);
        p.node = ret_;
        return Push(std::move(p));
      }
      case 3:
        if (f.flag) {
          f.state = 4;
          Frame p = F(Proc::kFilterExpr);
          p.node = ret_;
          return Push(std::move(p));
        }
        [[fallthrough]];
      case 4:
        Return(ret_);
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Primary(Frame& f) {
    if (f.state == 1) {
      const uint32_t inner = ret_;
      if (!Expect(Tok::kRParen)) return absl::OkStatus();
      Return(inner);
      return absl::OkStatus();
    }
    const Token& t = Cur();
    const uint32_t offset = t.offset;
    switch (t.type) {
      case Tok::kName: {
        const std::string name = Next().text;
        if (name == "true" || name == "false" || name == "True" || name == "False") {
          CKPT_MAKE(n, NodeKind::kConst, offset);
          N(n).const_type = ConstType::kBool;
          N(n).flag = name == "true" || name == "True";
          Return(n);
        } else if (name == "none" || name == "None") {
          CKPT_MAKE(n, NodeKind::kConst, offset);
          N(n).const_type = ConstType::kNone;
          Return(n);
        } else if (f.flag && Is(Tok::kDot)) {  // with_namespace (3.1.6)
          Next();
          std::optional<std::string> attr = ExpectAnyName();
          if (!attr.has_value()) return absl::OkStatus();
          CKPT_MAKE(n, NodeKind::kNSRef, offset);
          N(n).text = name;
          N(n).text2 = *attr;
          Return(n);
        } else {
          CKPT_MAKE(n, NodeKind::kName, offset);
          N(n).text = name;
          Return(n);
        }
        return absl::OkStatus();
      }
      case Tok::kString: {
        std::string value = Next().text;
        while (Is(Tok::kString)) value += Next().text;
        CKPT_MAKE(n, NodeKind::kConst, offset);
        N(n).const_type = ConstType::kStr;
        N(n).text = std::move(value);
        Return(n);
        return absl::OkStatus();
      }
      case Tok::kInteger:
      case Tok::kFloat: {
        const Token& num = Next();
        CKPT_MAKE(n, NodeKind::kConst, offset);
        if (num.type == Tok::kFloat) {
          N(n).const_type = ConstType::kFloat;
        } else if (num.integer.has_value()) {
          N(n).const_type = ConstType::kInt;
          N(n).integer = *num.integer;
        } else {
          N(n).const_type = ConstType::kBigInt;
        }
        N(n).text = num.text;
        Return(n);
        return absl::OkStatus();
      }
      case Tok::kLParen: {
        Next();
        f.state = 1;
        Frame tuple = F(Proc::kTuple);
        tuple.flag = true;   // explicit parentheses
        tuple.flag3 = true;  // with_condexpr
        return Push(std::move(tuple));
      }
      case Tok::kLBracket:
        f.proc = Proc::kList;
        return absl::OkStatus();
      case Tok::kLBrace:
        f.proc = Proc::kDict;
        return absl::OkStatus();
      default:
        Fail(absl::StrCat("unexpected '", Describe(t), "'"));
        return absl::OkStatus();
    }
  }

  // parse_tuple: flag explicit_parentheses, flag2 simplified, flag3 with_condexpr, flag4
  // is_tuple; `op` == kDot marks with_namespace for the simplified form.
  absl::Status TupleStep(Frame& f) {
    if (f.state == 2) {
      f.items.push_back(ret_);
      if (Is(Tok::kComma)) {
        f.flag4 = true;
        f.state = 1;
      } else {
        return TupleEnd(f);
      }
    }
    // state 0 or 1: another item?
    if (!f.items.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
    if (IsTupleEnd(f.end)) return TupleEnd(f);
    f.state = 2;
    if (f.flag2) {
      Frame p = F(Proc::kPrimary);
      p.flag = f.op == Tok::kDot;
      return Push(std::move(p));
    }
    return Push(F(f.flag3 ? Proc::kCondExpr : Proc::kOr));
  }
  absl::Status TupleEnd(Frame& f) {
    if (!f.flag4) {
      if (!f.items.empty()) {
        Return(f.items[0]);
        return absl::OkStatus();
      }
      if (!f.flag) {
        Fail(absl::StrCat("Expected an expression, got '", Describe(Cur()), "'"));
        return absl::OkStatus();
      }
    }
    CKPT_MAKE(n, NodeKind::kTuple, f.start);
    N(n).list = std::move(f.items);
    Return(n);
    return absl::OkStatus();
  }

  absl::Status ListStep(Frame& f) {
    if (f.state == 0) {
      if (!Expect(Tok::kLBracket)) return absl::OkStatus();
      f.state = 1;
    } else if (f.state == 2) {
      f.items.push_back(ret_);
    }
    if (!Is(Tok::kRBracket)) {
      if (!f.items.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
      if (!Is(Tok::kRBracket)) {
        f.state = 2;
        return Push(F(Proc::kCondExpr));
      }
    }
    if (!Expect(Tok::kRBracket)) return absl::OkStatus();
    CKPT_MAKE(n, NodeKind::kList, f.start);
    N(n).list = std::move(f.items);
    Return(n);
    return absl::OkStatus();
  }

  absl::Status DictStep(Frame& f) {
    if (f.state == 0) {
      if (!Expect(Tok::kLBrace)) return absl::OkStatus();
      f.state = 1;
    } else if (f.state == 2) {  // the key is read
      f.aux = ret_;
      if (!Expect(Tok::kColon)) return absl::OkStatus();
      f.state = 3;
      return Push(F(Proc::kCondExpr));
    } else if (f.state == 3) {
      CKPT_MAKE(p, NodeKind::kPair, N(f.aux).offset, f.aux, ret_);
      f.items.push_back(p);
    }
    if (!Is(Tok::kRBrace)) {
      if (!f.items.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
      if (!Is(Tok::kRBrace)) {
        f.state = 2;
        return Push(F(Proc::kCondExpr));
      }
    }
    if (!Expect(Tok::kRBrace)) return absl::OkStatus();
    CKPT_MAKE(n, NodeKind::kDict, f.start);
    N(n).list = std::move(f.items);
    Return(n);
    return absl::OkStatus();
  }

  absl::Status Postfix(Frame& f) {
    if (f.state == 1) f.node = ret_;
    f.state = 1;
    if (Is(Tok::kDot) || Is(Tok::kLBracket)) {
      Frame s = F(Proc::kSubscript);
      s.node = f.node;
      return Push(std::move(s));
    }
    if (Is(Tok::kLParen)) return PushCall(f.node);
    Return(f.node);
    return absl::OkStatus();
  }

  absl::Status FilterExpr(Frame& f) {
    if (f.state == 1) f.node = ret_;
    f.state = 1;
    if (Is(Tok::kPipe)) {
      Frame s = F(Proc::kFilter);
      s.node = f.node;
      return Push(std::move(s));
    }
    if (IsName("is")) {
      Frame s = F(Proc::kTest);
      s.node = f.node;
      return Push(std::move(s));
    }
    if (Is(Tok::kLParen)) return PushCall(f.node);
    Return(f.node);
    return absl::OkStatus();
  }

  // parse_call: a Call node around `callee`, its arguments read by kCallArgs.
  absl::Status PushCall(uint32_t callee) {
    CKPT_MAKE(n, NodeKind::kCall, N(callee).offset, callee);
    Frame a = F(Proc::kCallArgs);
    a.node = n;
    return Push(std::move(a));
  }

  absl::Status Subscript(Frame& f) {
    if (f.state == 0) {
      const Token& t = Next();
      if (t.type == Tok::kDot) {
        const Token& attr = Cur();
        const uint32_t attr_offset = attr.offset;
        if (attr.type == Tok::kName) {
          std::string name = Next().text;
          CKPT_MAKE(n, NodeKind::kGetattr, N(f.node).offset, f.node);
          N(n).text = std::move(name);
          N(n).integer = attr_offset;  // where the attribute's name is
          Return(n);
          return absl::OkStatus();
        }
        if (attr.type != Tok::kInteger) {
          Next();
          FailAt(attr_offset, "expected name or number");
          return absl::OkStatus();
        }
        const Token& num = Next();
        CKPT_MAKE(k, NodeKind::kConst, attr_offset);
        N(k).const_type = num.integer.has_value() ? ConstType::kInt : ConstType::kBigInt;
        N(k).integer = num.integer.value_or(0);
        N(k).text = num.text;
        CKPT_MAKE(n, NodeKind::kGetitem, N(f.node).offset, f.node, k);
        N(n).integer = attr_offset;
        Return(n);
        return absl::OkStatus();
      }
      if (t.type != Tok::kLBracket) {
        FailAt(t.offset, "expected subscript expression");
        return absl::OkStatus();
      }
      f.aux = t.offset;
      f.state = 1;
    } else {
      f.items.push_back(ret_);
    }
    if (!Is(Tok::kRBracket)) {
      if (!f.items.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
      return Push(F(Proc::kSubscribed));
    }
    Next();
    uint32_t key;
    if (f.items.size() == 1) {
      key = f.items[0];
    } else {
      CKPT_MAKE(t, NodeKind::kTuple, f.aux);
      N(t).list = std::move(f.items);
      key = t;
    }
    CKPT_MAKE(n, NodeKind::kGetitem, N(f.node).offset, f.node, key);
    N(n).integer = f.aux;  // where the subscript opens
    Return(n);
    return absl::OkStatus();
  }

  absl::Status Subscribed(Frame& f) {
    const auto slice_end = [&]() { return Is(Tok::kRBracket) || Is(Tok::kComma); };
    switch (f.state) {
      case 0:
        if (Skip(Tok::kColon)) {
          f.items.push_back(kNoNode);
          f.state = 3;
          return absl::OkStatus();
        }
        f.state = 1;
        return Push(F(Proc::kCondExpr));
      case 1:
        if (!Is(Tok::kColon)) {
          Return(ret_);
          return absl::OkStatus();
        }
        Next();
        f.items.push_back(ret_);
        f.state = 3;
        return absl::OkStatus();
      case 3:
        if (Is(Tok::kColon)) {
          f.items.push_back(kNoNode);
        } else if (!slice_end()) {
          f.state = 4;
          return Push(F(Proc::kCondExpr));
        } else {
          f.items.push_back(kNoNode);
        }
        f.state = 5;
        return absl::OkStatus();
      case 4:
        f.items.push_back(ret_);
        f.state = 5;
        return absl::OkStatus();
      case 5:
        if (Skip(Tok::kColon)) {
          if (!slice_end()) {
            f.state = 6;
            return Push(F(Proc::kCondExpr));
          }
        }
        f.items.push_back(kNoNode);
        break;
      case 6:
        f.items.push_back(ret_);
        break;
    }
    CKPT_MAKE(n, NodeKind::kSlice, f.start, f.items[0], f.items[1], f.items[2]);
    Return(n);
    return absl::OkStatus();
  }

  // parse_call_args into f.node (a Call, Filter or Test): list args, list2 keywords, b *args,
  // c **kwargs.
  absl::Status CallArgs(Frame& f) {
    if (f.state == 0) {
      if (!Expect(Tok::kLParen)) return absl::OkStatus();
      f.aux = last_end_ - 1;
      f.state = 1;
    } else if (f.state == 2) {
      Node& n = N(f.node);
      if (f.op == Tok::kMul) {
        n.b = ret_;
      } else if (f.op == Tok::kPow) {
        n.c = ret_;
      } else if (f.op == Tok::kAssign) {
        CKPT_MAKE(k, NodeKind::kKeyword, N(ret_).offset, ret_);
        N(k).text = f.key;
        N(f.node).list2.push_back(k);
      } else {
        n.list.push_back(ret_);
      }
      f.flag = true;  // require_comma
      f.state = 1;
    }
    const auto ensure = [&](bool ok) {
      if (!ok) FailAt(f.aux, "invalid syntax for function call expression");
      return ok;
    };
    if (!Is(Tok::kRParen)) {
      if (f.flag) {
        if (!Expect(Tok::kComma)) return absl::OkStatus();
      }
      if (!Is(Tok::kRParen)) {
        Node& n = N(f.node);
        if (Is(Tok::kMul)) {
          if (!ensure(n.b == kNoNode && n.c == kNoNode)) return absl::OkStatus();
          Next();
          f.op = Tok::kMul;
        } else if (Is(Tok::kPow)) {
          if (!ensure(n.c == kNoNode)) return absl::OkStatus();
          Next();
          f.op = Tok::kPow;
        } else if (Is(Tok::kName) && Look().type == Tok::kAssign) {
          if (!ensure(n.c == kNoNode)) return absl::OkStatus();
          f.key = Next().text;
          Next();
          f.op = Tok::kAssign;
        } else {
          if (!ensure(n.b == kNoNode && n.c == kNoNode && n.list2.empty())) {
            return absl::OkStatus();
          }
          f.op = Tok::kEof;
        }
        f.state = 2;
        return Push(F(Proc::kCondExpr));
      }
    }
    if (!Expect(Tok::kRParen)) return absl::OkStatus();
    Return(f.node);
    return absl::OkStatus();
  }

  // parse_filter: f.node the value (kNoNode in a block), f.flag start_inline.
  absl::Status FilterStep(Frame& f) {
    if (f.state == 1) f.node = ret_;
    if (!(Is(Tok::kPipe) || f.flag)) {
      Return(f.node);
      return absl::OkStatus();
    }
    if (!f.flag) Next();
    const uint32_t offset = Cur().offset;
    std::optional<std::string> name = ExpectAnyName();
    if (!name.has_value()) return absl::OkStatus();
    while (Is(Tok::kDot)) {
      Next();
      std::optional<std::string> part = ExpectAnyName();
      if (!part.has_value()) return absl::OkStatus();
      absl::StrAppend(&*name, ".", *part);
    }
    CKPT_MAKE(n, NodeKind::kFilter, f.node == kNoNode ? offset : N(f.node).offset, f.node);
    N(n).text = std::move(*name);
    N(n).integer = offset;  // where the filter's name is
    f.node = n;
    f.flag = false;
    f.state = 1;
    if (Is(Tok::kLParen)) {
      Frame a = F(Proc::kCallArgs);
      a.node = n;
      return Push(std::move(a));
    }
    ret_ = n;
    return absl::OkStatus();
  }

  absl::Status TestStep(Frame& f) {
    switch (f.state) {
      case 0: {
        Next();  // "is"
        f.flag = SkipName("not");
        const uint32_t offset = Cur().offset;
        std::optional<std::string> name = ExpectAnyName();
        if (!name.has_value()) return absl::OkStatus();
        while (Is(Tok::kDot)) {
          Next();
          std::optional<std::string> part = ExpectAnyName();
          if (!part.has_value()) return absl::OkStatus();
          absl::StrAppend(&*name, ".", *part);
        }
        CKPT_MAKE(n, NodeKind::kTest, N(f.node).offset, f.node);
        N(n).text = std::move(*name);
        N(n).integer = offset;
        f.aux = n;
        const Tok t = Cur().type;
        if (t == Tok::kLParen) {
          f.state = 1;
          Frame a = F(Proc::kCallArgs);
          a.node = n;
          return Push(std::move(a));
        }
        if ((t == Tok::kName || t == Tok::kString || t == Tok::kInteger || t == Tok::kFloat ||
             t == Tok::kLParen || t == Tok::kLBracket || t == Tok::kLBrace) &&
            !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) {
            Fail("You cannot chain multiple tests with is");
            return absl::OkStatus();
          }
          f.state = 2;
          return Push(F(Proc::kPrimary));
        }
        break;
      }
      case 1:
        break;
      case 2: {
        f.state = 3;
        Frame p = F(Proc::kPostfix);
        p.node = ret_;
        return Push(std::move(p));
      }
      case 3:
        N(f.aux).list.push_back(ret_);
        break;
    }
    N(f.aux).end = last_end_;
    if (f.flag) {
      CKPT_MAKE(n, NodeKind::kNot, N(f.aux).offset, f.aux);
      Return(n);
    } else {
      Return(f.aux);
    }
    return absl::OkStatus();
  }

  // ---- expression entry points ------------------------------------------------------

  absl::Status Expression(uint32_t* out) { return Run(F(Proc::kCondExpr), out); }

  absl::Status Tuple(uint32_t* out, bool with_condexpr = true, EndRule end = EndRule::kNone) {
    Frame f = F(Proc::kTuple);
    f.flag3 = with_condexpr;
    f.end = end;
    return Run(std::move(f), out);
  }

  // parse_assign_target. `kind`: 0 default (a tuple of names), 1 name_only, 2 with_namespace.
  // `store`: the names are assigned (set, for), not parameters (with, macro, call).
  absl::Status AssignTarget(uint32_t* out, int kind, EndRule end = EndRule::kNone,
                            bool store = false) {
    *out = kNoNode;
    if (kind == 1) {
      const uint32_t offset = Cur().offset;
      std::optional<std::string> name = ExpectAnyName();
      if (!name.has_value()) return absl::OkStatus();
      CKPT_MAKE(n, NodeKind::kName, offset);
      N(n).text = std::move(*name);
      *out = n;
    } else if (kind == 2 && Is(Tok::kName) && Look().type == Tok::kDot &&
               !((pos_ + 3 < toks_->size()) && (*toks_)[pos_ + 3].type == Tok::kComma)) {
      // 3.1.2: `name.attr` read before anything else, even `true.x`.
      const uint32_t offset = Cur().offset;
      std::string name = Next().text;
      Next();
      std::optional<std::string> attr = ExpectAnyName();
      if (!attr.has_value()) return absl::OkStatus();
      CKPT_MAKE(n, NodeKind::kNSRef, offset);
      N(n).text = std::move(name);
      N(n).text2 = std::move(*attr);
      *out = n;
    } else {
      Frame f = F(Proc::kTuple);
      f.flag2 = true;  // simplified
      f.end = end;
      if (kind == 2) f.op = Tok::kDot;  // with_namespace (3.1.6)
      absl::Status s = Run(std::move(f), out);
      if (!s.ok() || *out == kNoNode) return s;
    }
    // can_assign: names other than the constants' spellings, namespace references, tuples
    // of those.
    std::vector<uint32_t> work = {*out};
    while (!work.empty()) {
      const uint32_t i = work.back();
      work.pop_back();
      Node& n = N(i);
      if (n.kind == NodeKind::kTuple) {
        work.insert(work.end(), n.list.begin(), n.list.end());
        continue;
      }
      const bool ok =
          (n.kind == NodeKind::kName && n.text != "true" && n.text != "false" &&
           n.text != "none" && n.text != "True" && n.text != "False" && n.text != "None") ||
          n.kind == NodeKind::kNSRef;
      if (!ok) {
        const Node& top = N(*out);
        FailAt(top.offset, absl::StrCat("can't assign to '", base::AbslView(KindName(top.kind)), "'"));
        *out = kNoNode;
        return absl::OkStatus();
      }
      if (store && n.kind == NodeKind::kName && n.text == "loop") ++loop_stores_;
    }
    return absl::OkStatus();
  }

  static std::string_view KindName(NodeKind k) {
    switch (k) {
      case NodeKind::kName:
        return "name";
      case NodeKind::kConst:
        return "const";
      case NodeKind::kTuple:
        return "tuple";
      case NodeKind::kList:
        return "list";
      case NodeKind::kDict:
        return "dict";
      case NodeKind::kGetattr:
        return "getattr";
      case NodeKind::kGetitem:
        return "getitem";
      case NodeKind::kCall:
        return "call";
      default:
        return "expression";
    }
  }

  // ---- statements ---------------------------------------------------------------------

  absl::Status OpenBody(uint32_t owner, int which, std::vector<std::string_view> end,
                        uint32_t root_if = 0) {
    // parse_statements: an optional colon, then the end of the tag.
    Skip(Tok::kColon);
    if (!Expect(Tok::kBlockEnd)) return absl::OkStatus();
    if (bodies_.size() >= limits_.max_nesting) {
      return base::LimitError(
          absl::StrCat("statements nested more than ", limits_.max_nesting, " deep"),
          "max_nesting", limits_.max_nesting);
    }
    Body b;
    b.owner = owner;
    b.which = which;
    b.end = std::move(end);
    b.root_if = root_if;
    bodies_.push_back(std::move(b));
    return absl::OkStatus();
  }

  std::vector<uint32_t>& BodyList(const Body& b) {
    Node& n = N(b.owner);
    return b.which == 0 ? n.list : b.which == 1 ? n.list2 : n.list3;
  }

  absl::Status Flush(Body& b) {
    if (b.buffer.empty()) return absl::OkStatus();
    CKPT_MAKE(n, NodeKind::kOutput, N(b.buffer.front()).offset);
    N(n).list = std::move(b.buffer);
    b.buffer.clear();
    BodyList(b).push_back(n);
    return absl::OkStatus();
  }

  // The body of statement `done` is complete: it joins the enclosing body, whose tag ends.
  absl::Status Finish(uint32_t done) {
    N(done).end = last_end_;
    BodyList(bodies_.back()).push_back(done);
    Expect(Tok::kBlockEnd);
    return absl::OkStatus();
  }

  // The message Jinja gives at the end of the template or an unknown tag (_fail_ut_eof).
  void FailTag(const std::string* name, uint32_t offset) {
    std::vector<std::string> message = {name == nullptr
                                            ? std::string("Unexpected end of template.")
                                            : absl::StrCat("Encountered unknown tag '", *name,
                                                           "'.")};
    if (bodies_.size() > 1) {
      std::vector<std::string> looking;
      for (std::string_view e : bodies_.back().end) looking.push_back(absl::StrCat("'", base::AbslView(e), "'"));
      message.push_back(absl::StrCat("Jinja was looking for the following tags: ",
                                     absl::StrJoin(looking, " or "), "."));
      message.push_back(absl::StrCat("The innermost block that needs to be closed is '",
                                     base::AbslView(TagName(N(bodies_.back().owner).kind)), "'."));
    }
    FailAt(offset, absl::StrJoin(message, " "));
  }

  static std::string_view TagName(NodeKind k) {
    switch (k) {
      case NodeKind::kFor:
        return "for";
      case NodeKind::kIf:
        return "if";
      case NodeKind::kMacro:
        return "macro";
      case NodeKind::kCallBlock:
        return "call";
      case NodeKind::kFilterBlock:
        return "filter";
      case NodeKind::kWith:
        return "with";
      case NodeKind::kAssignBlock:
        return "set";
      case NodeKind::kBlock:
        return "block";
      case NodeKind::kScope:
        return "autoescape";
      case NodeKind::kGeneration:
        return "generation";
      default:
        return "?";
    }
  }

  absl::Status Statements() {
    bodies_.push_back(Body{});
    while (!problem_.has_value()) {
      Body& b = bodies_.back();
      const Token& t = Cur();
      if (t.type == Tok::kEof) {
        absl::Status s = Flush(b);
        if (!s.ok()) return s;
        if (bodies_.size() > 1) FailTag(nullptr, t.offset);
        return absl::OkStatus();
      }
      if (t.type == Tok::kData) {
        CKPT_MAKE(n, NodeKind::kTemplateData, t.offset);
        N(n).text = t.text;
        N(n).text2 = t.trimmed;
        N(n).end = t.end;
        b.buffer.push_back(n);
        Next();
        continue;
      }
      if (t.type == Tok::kVariableBegin) {
        Next();
        uint32_t e;
        absl::Status s = Tuple(&e);
        if (!s.ok()) return s;
        if (e == kNoNode || !Expect(Tok::kVariableEnd)) return absl::OkStatus();
        bodies_.back().buffer.push_back(e);
        continue;
      }
      if (t.type != Tok::kBlockBegin) {
        FailAt(t.offset, "internal parsing error");
        return absl::OkStatus();
      }
      absl::Status s = Flush(b);
      if (!s.ok()) return s;
      Next();
      if (problem_.has_value()) return absl::OkStatus();
      const Body& top = bodies_.back();
      if (Is(Tok::kName) &&
          std::find(top.end.begin(), top.end.end(), Cur().text) != top.end.end()) {
        s = EndBody();
      } else {
        s = Statement();
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // The current body ended at its end tag (the current token).
  absl::Status EndBody() {
    Body b = std::move(bodies_.back());
    bodies_.pop_back();
    Node& owner = N(b.owner);
    const std::string tag = Next().text;
    if (problem_.has_value()) return absl::OkStatus();
    switch (owner.kind) {
      case NodeKind::kFor:
        if (b.which == 0 && tag == "else") {
          absl::Status s = OpenBody(b.owner, 1, {"endfor"});
          if (s.ok() && !problem_.has_value()) bodies_.back().loop_stores = b.loop_stores;
          return s;
        }
        if (loop_stores_ > b.loop_stores) {
          FailAt(owner.offset, "Can't assign to special loop variable in for-loop target");
          return absl::OkStatus();
        }
        return Finish(b.owner);
      case NodeKind::kIf: {
        const uint32_t root = b.root_if == 0 ? b.owner : b.root_if;
        if (b.which == 0 && tag == "elif") {
          CKPT_MAKE(e, NodeKind::kIf, Cur().offset);
          N(root).list2.push_back(e);
          uint32_t test;
          absl::Status s = Tuple(&test, /*with_condexpr=*/false);
          if (!s.ok() || test == kNoNode) return s;
          N(e).a = test;
          return OpenBody(e, 0, {"elif", "else", "endif"}, root);
        }
        if (b.which == 0 && tag == "else") return OpenBody(root, 2, {"endif"});
        return Finish(root);
      }
      case NodeKind::kBlock:
        return FinishBlock(b.owner);
      default:
        return Finish(b.owner);
    }
  }

  absl::Status FinishBlock(uint32_t block) {
    const Node& n = N(block);
    if (n.integer == 1) {  // required
      for (uint32_t child : n.list) {
        bool ok = N(child).kind == NodeKind::kOutput;
        if (ok) {
          for (uint32_t d : N(child).list) {
            const Node& data = N(d);
            ok = ok && data.kind == NodeKind::kTemplateData && !data.text.empty() &&
                 std::all_of(data.text.begin(), data.text.end(), [](char c) {
                   return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
                 });
          }
        }
        if (!ok) {
          Fail("Required blocks can only contain comments or whitespace");
          return absl::OkStatus();
        }
      }
    }
    const std::string name = n.text;
    SkipName(name);
    return Finish(block);
  }

  absl::Status Statement() {
    const Token& t = Cur();
    if (t.type != Tok::kName) {
      FailAt(t.offset, "tag name expected");
      return absl::OkStatus();
    }
    const std::string tag = t.text;
    const uint32_t offset = t.offset;
    uint32_t e = kNoNode;
    absl::Status s;
    const auto simple = [&](uint32_t node) -> absl::Status {
      if (problem_.has_value()) return absl::OkStatus();
      N(node).end = last_end_;
      BodyList(bodies_.back()).push_back(node);
      Expect(Tok::kBlockEnd);
      return absl::OkStatus();
    };
    if (tag == "for") {
      Next();
      CKPT_MAKE(n, NodeKind::kFor, offset);
      const uint32_t stores = loop_stores_;
      if (!(s = AssignTarget(&e, 0, EndRule::kIn, true)).ok() || e == kNoNode) return s;
      N(n).a = e;
      if (!ExpectName("in")) return absl::OkStatus();
      if (!(s = Tuple(&e, false, EndRule::kRecursive)).ok() || e == kNoNode) return s;
      N(n).b = e;
      if (SkipName("if")) {
        if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
        N(n).c = e;
      }
      N(n).flag = SkipName("recursive");
      s = OpenBody(n, 0, {"endfor", "else"});
      if (s.ok() && !problem_.has_value()) bodies_.back().loop_stores = stores;
      return s;
    }
    if (tag == "if") {
      Next();
      CKPT_MAKE(n, NodeKind::kIf, offset);
      if (!(s = Tuple(&e, false)).ok() || e == kNoNode) return s;
      N(n).a = e;
      return OpenBody(n, 0, {"elif", "else", "endif"});
    }
    if (tag == "block") {
      Next();
      CKPT_MAKE(n, NodeKind::kBlock, offset);
      std::optional<std::string> name = ExpectAnyName();
      if (!name.has_value()) return absl::OkStatus();
      N(n).text = *name;
      N(n).flag = SkipName("scoped");
      N(n).integer = SkipName("required") ? 1 : 0;
      if (Is(Tok::kSub)) {
        Fail("Block names in Jinja have to be valid Python identifiers and may not contain "
             "hyphens, use an underscore instead.");
        return absl::OkStatus();
      }
      return OpenBody(n, 0, {"endblock"});
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from") {
      Next();
      const NodeKind kind = tag == "extends"   ? NodeKind::kExtends
                            : tag == "include" ? NodeKind::kInclude
                            : tag == "import"  ? NodeKind::kImport
                                               : NodeKind::kFromImport;
      CKPT_MAKE(n, kind, offset);
      if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
      N(n).a = e;
      if (kind == NodeKind::kInclude) {
        if (IsName("ignore") && Look().type == Tok::kName && Look().text == "missing") {
          Next();
          Next();
          N(n).flag = true;
        }
        ImportContext();
      } else if (kind == NodeKind::kImport) {
        if (!ExpectName("as")) return absl::OkStatus();
        if (!(s = AssignTarget(&e, 1)).ok() || e == kNoNode) return s;
        N(n).text = N(e).text;
        ImportContext();
      } else if (kind == NodeKind::kFromImport) {
        if (!ExpectName("import")) return absl::OkStatus();
        if (!(s = FromNames(n)).ok()) return s;
      }
      return simple(n);
    }
    if (tag == "set") {
      Next();
      if (!(s = AssignTarget(&e, 2, EndRule::kNone, true)).ok() || e == kNoNode) return s;
      const uint32_t target = e;
      if (Skip(Tok::kAssign)) {
        CKPT_MAKE(n, NodeKind::kAssign, offset, target);
        if (!(s = Tuple(&e)).ok() || e == kNoNode) return s;
        N(n).b = e;
        return simple(n);
      }
      CKPT_MAKE(n, NodeKind::kAssignBlock, offset, target);
      Frame f = F(Proc::kFilter);
      if (!(s = Run(std::move(f), &e)).ok() || problem_.has_value()) return s;
      N(n).b = e;
      return OpenBody(n, 0, {"endset"});
    }
    if (tag == "with") {
      Next();
      CKPT_MAKE(n, NodeKind::kWith, offset);
      while (!Is(Tok::kBlockEnd) && !problem_.has_value()) {
        if (!N(n).list2.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
        if (!(s = AssignTarget(&e, 0)).ok() || e == kNoNode) return s;
        N(n).list2.push_back(e);
        if (!Expect(Tok::kAssign)) return absl::OkStatus();
        if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
        N(n).list3.push_back(e);
      }
      return OpenBody(n, 0, {"endwith"});
    }
    if (tag == "autoescape") {
      Next();
      CKPT_MAKE(n, NodeKind::kScope, offset);
      if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
      N(n).a = e;
      return OpenBody(n, 0, {"endautoescape"});
    }
    if (tag == "print") {
      Next();
      CKPT_MAKE(n, NodeKind::kOutput, offset);
      while (!Is(Tok::kBlockEnd) && !problem_.has_value()) {
        if (!N(n).list.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
        if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
        N(n).list.push_back(e);
      }
      return simple(n);
    }
    if (tag == "macro") {
      Next();
      CKPT_MAKE(n, NodeKind::kMacro, offset);
      if (!(s = AssignTarget(&e, 1)).ok() || e == kNoNode) return s;
      N(n).text = N(e).text;
      if (!(s = Signature(n)).ok() || problem_.has_value()) return s;
      return OpenBody(n, 0, {"endmacro"});
    }
    if (tag == "call") {
      Next();
      CKPT_MAKE(n, NodeKind::kCallBlock, offset);
      if (Is(Tok::kLParen)) {
        if (!(s = Signature(n)).ok() || problem_.has_value()) return s;
      }
      if (!(s = Expression(&e)).ok() || e == kNoNode) return s;
      if (N(e).kind != NodeKind::kCall) {
        FailAt(offset, "expected call");
        return absl::OkStatus();
      }
      N(n).a = e;
      return OpenBody(n, 0, {"endcall"});
    }
    if (tag == "filter") {
      Next();
      CKPT_MAKE(n, NodeKind::kFilterBlock, offset);
      Frame f = F(Proc::kFilter);
      f.flag = true;  // start_inline
      if (!(s = Run(std::move(f), &e)).ok() || e == kNoNode) return s;
      N(n).a = e;
      return OpenBody(n, 0, {"endfilter"});
    }
    // Extensions: jinja2.ext.loopcontrols and transformers' AssistantTracker.
    if (tag == "break" || tag == "continue") {
      Next();
      CKPT_MAKE(n, tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, offset);
      return simple(n);
    }
    if (tag == "generation") {
      Next();
      CKPT_MAKE(n, NodeKind::kGeneration, offset);
      return OpenBody(n, 0, {"endgeneration"});
    }
    FailTag(&tag, offset);
    return absl::OkStatus();
  }

  void ImportContext() {
    if ((IsName("with") || IsName("without")) && Look().type == Tok::kName &&
        Look().text == "context") {
      Next();
      Next();
    }
  }

  absl::Status FromNames(uint32_t n) {
    const auto context = [&]() {
      if ((IsName("with") || IsName("without")) && Look().type == Tok::kName &&
          Look().text == "context") {
        Next();
        Next();
        return true;
      }
      return false;
    };
    while (!problem_.has_value()) {
      if (!N(n).names.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
      if (!Is(Tok::kName)) {
        ExpectAnyName();
        return absl::OkStatus();
      }
      if (context()) break;
      uint32_t target;
      absl::Status s = AssignTarget(&target, 1);
      if (!s.ok() || target == kNoNode) return s;
      if (!N(target).text.empty() && N(target).text[0] == '_') {
        FailAt(N(target).offset, "names starting with an underline can not be imported");
        return absl::OkStatus();
      }
      std::string alias = N(target).text;
      if (SkipName("as")) {
        uint32_t a;
        s = AssignTarget(&a, 1);
        if (!s.ok() || a == kNoNode) return s;
        alias = N(a).text;
      }
      N(n).names.emplace_back(N(target).text, std::move(alias));
      if (context() || !Is(Tok::kComma)) break;
    }
    return absl::OkStatus();
  }

  absl::Status Signature(uint32_t n) {
    if (!Expect(Tok::kLParen)) return absl::OkStatus();
    while (!Is(Tok::kRParen) && !problem_.has_value()) {
      if (!N(n).list2.empty() && !Expect(Tok::kComma)) return absl::OkStatus();
      uint32_t arg;
      absl::Status s = AssignTarget(&arg, 1);
      if (!s.ok() || arg == kNoNode) return s;
      if (Skip(Tok::kAssign)) {
        uint32_t d;
        s = Expression(&d);
        if (!s.ok() || d == kNoNode) return s;
        N(n).list3.push_back(d);
      } else if (!N(n).list3.empty()) {
        Fail("non-default argument follows default argument");
        return absl::OkStatus();
      }
      N(n).list2.push_back(arg);
    }
    Expect(Tok::kRParen);
    return absl::OkStatus();
  }

  // ---- compile-time checks ------------------------------------------------------------

  // What jinja2's code generator refuses, on a walk with an explicit stack.
  absl::Status Validate();

  Lexed lexed_;
  const std::vector<Token>* toks_ = nullptr;
  size_t sentinel_ = SIZE_MAX;
  const Limits& limits_;
  size_t pos_ = 0;
  uint32_t last_end_ = 0;
  Tree tree_;
  std::optional<Problem> problem_;
  std::vector<Frame> stack_;
  uint32_t ret_ = kNoNode;
  std::vector<Body> bodies_;
  uint32_t loop_stores_ = 0;
};


// The frame a node is compiled in, as far as the checks below care (jinja2.compiler.Frame).
struct Context {
  bool soft = false;      // inside {% if %} or an inline if: unknown filters fail at runtime only
  bool toplevel = true;   // the root, or an if at the root: {% extends %} is allowed
  bool in_loop = false;   // a Python loop encloses the code in its function
  int blocks = 0;         // Python blocks (loops) nested in the function
};

absl::Status Parser::Validate() {
  std::vector<std::pair<uint32_t, Context>> work = {{0, Context{}}};
  std::vector<std::string> blocks_seen;
  uint64_t steps = 0;
  const auto add = [&](uint32_t node, const Context& c) {
    if (node != kNoNode) work.emplace_back(node, c);
  };
  const auto add_all = [&](const std::vector<uint32_t>& nodes, const Context& c) {
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) add(*it, c);
  };
  const auto fail = [&](uint32_t offset, std::string message) {
    FailAt(offset, std::move(message));
  };
  // Keyword arguments given twice are a Python syntax error unless one of them (or `extra`)
  // is a Python keyword, when Jinja passes them through a dict.
  const auto keywords = [&](const Node& n, std::string_view extra) {
    std::vector<std::string_view> keys;
    bool workaround = !extra.empty() && In(kPythonKeywords, extra);
    for (uint32_t k : n.list2) {
      keys.push_back(N(k).text);
      workaround = workaround || In(kPythonKeywords, N(k).text);
    }
    if (!extra.empty()) keys.push_back(extra);
    if (workaround) return;
    std::sort(keys.begin(), keys.end());
    if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) {
      fail(n.offset, "keyword argument repeated");
    }
  };
  // A macro or call block: parameters named twice; `caller` as a parameter without a default
  // in a macro whose body names it (compiler.macro_body).
  const auto signature = [&](const Node& n) {
    std::vector<std::string_view> names;
    int caller_index = -1;
    for (size_t i = 0; i < n.list2.size(); ++i) {
      names.push_back(N(n.list2[i]).text);
      if (N(n.list2[i]).text == "caller") caller_index = static_cast<int>(i);
    }
    std::vector<std::string_view> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      fail(n.offset, "duplicate argument in a macro's parameters");
      return;
    }
    if (caller_index < 0) return;
    const size_t without_default = n.list2.size() - n.list3.size();
    if (static_cast<size_t>(caller_index) >= without_default) return;
    // Does the body load `caller` (outside nested blocks)?
    std::vector<uint32_t> scan(n.list.begin(), n.list.end());
    while (!scan.empty()) {
      const Node& m = N(scan.back());
      scan.pop_back();
      if (m.kind == NodeKind::kBlock) continue;
      if (m.kind == NodeKind::kName && m.text == "caller") {
        fail(n.offset,
             "When defining macros or call blocks the special \"caller\" argument must be "
             "omitted or be given a default.");
        return;
      }
      for (uint32_t c : {m.a, m.b, m.c}) {
        if (c != kNoNode) scan.push_back(c);
      }
      scan.insert(scan.end(), m.list.begin(), m.list.end());
      scan.insert(scan.end(), m.list2.begin(), m.list2.end());
      scan.insert(scan.end(), m.list3.begin(), m.list3.end());
    }
  };
  while (!work.empty() && !problem_.has_value()) {
    if (++steps > limits_.max_nodes * 4) break;  // each node is visited a bounded number of times
    const auto [i, ctx] = work.back();
    work.pop_back();
    const Node& n = N(i);
    Context inner = ctx;  // frame.inner(): not soft, not toplevel
    inner.soft = false;
    inner.toplevel = false;
    Context function;  // a new Python function (macro, call body, block)
    function.toplevel = false;
    Context soft = ctx;
    soft.soft = true;
    switch (n.kind) {
      case NodeKind::kFor: {
        Context body = inner;
        body.in_loop = true;
        body.blocks = n.flag ? 1 : ctx.blocks + 1;  // a recursive loop is a function of its own
        if (body.blocks > kMaxPythonBlocks) {
          fail(n.offset, "too many statically nested blocks");
          break;
        }
        Context orelse = inner;
        add(n.a, inner);
        add(n.b, ctx);
        add(n.c, inner);
        add_all(n.list, body);
        add_all(n.list2, orelse);
        break;
      }
      case NodeKind::kIf:
        add(n.a, soft);
        add_all(n.list, soft);
        add_all(n.list2, soft);
        add_all(n.list3, soft);
        break;
      case NodeKind::kMacro:
      case NodeKind::kCallBlock:
        signature(n);
        add(n.a, ctx);
        if (n.kind == NodeKind::kCallBlock && n.a != kNoNode) keywords(N(n.a), "caller");
        add_all(n.list3, function);
        add_all(n.list, function);
        break;
      case NodeKind::kGeneration:
        add_all(n.list, function);
        break;
      case NodeKind::kFilterBlock:
      case NodeKind::kAssignBlock:
      case NodeKind::kScope:
        add(n.a, n.kind == NodeKind::kAssignBlock ? ctx : inner);
        add(n.b, inner);
        add_all(n.list, inner);
        break;
      case NodeKind::kWith:
        add_all(n.list3, ctx);
        add_all(n.list, inner);
        break;
      case NodeKind::kBlock:
        if (std::find(blocks_seen.begin(), blocks_seen.end(), n.text) != blocks_seen.end()) {
          fail(n.offset, absl::StrCat("block '", n.text, "' defined twice"));
          break;
        }
        blocks_seen.push_back(n.text);
        add_all(n.list, function);
        break;
      case NodeKind::kExtends:
        if (!ctx.toplevel) {
          fail(n.offset, "cannot use extend from a non top-level scope");
          break;
        }
        add(n.a, ctx);
        break;
      case NodeKind::kBreak:
      case NodeKind::kContinue:
        if (!ctx.in_loop) {
          fail(n.offset, n.kind == NodeKind::kBreak ? "'break' outside loop"
                                                     : "'continue' not properly in loop");
        }
        break;
      case NodeKind::kCondExpr:
        add(n.a, soft);
        add(n.b, soft);
        add(n.c, soft);
        break;
      case NodeKind::kFilter:
      case NodeKind::kTest: {
        const bool filter = n.kind == NodeKind::kFilter;
        if (!ctx.soft && !(filter ? IsBuiltinFilter(n.text) : IsBuiltinTest(n.text))) {
          fail(static_cast<uint32_t>(n.integer),
               absl::StrCat("No ", filter ? "filter" : "test", " named '", n.text, "'."));
          break;
        }
        keywords(n, "");
        add(n.a, ctx);
        add(n.b, ctx);
        add(n.c, ctx);
        add_all(n.list, ctx);
        add_all(n.list2, ctx);
        break;
      }
      case NodeKind::kCall:
        keywords(n, "");
        add(n.a, ctx);
        add(n.b, ctx);
        add(n.c, ctx);
        add_all(n.list, ctx);
        add_all(n.list2, ctx);
        break;
      default:
        add(n.a, ctx);
        add(n.b, ctx);
        add(n.c, ctx);
        add_all(n.list, ctx);
        add_all(n.list2, ctx);
        add_all(n.list3, ctx);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Parsed> Parse(std::string_view text, const Limits& limits) {
  absl::StatusOr<Lexed> lexed = Lex(text, limits);
  if (!lexed.ok()) return lexed.status();
  return Parser(*std::move(lexed), limits).Run();
}

bool IsBuiltinFilter(std::string_view name) { return In(kFilters, name); }
bool IsBuiltinTest(std::string_view name) { return In(kTests, name); }

}  // namespace ckptscan::jinja
