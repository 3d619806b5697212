// The syntax tree of a Jinja template (jinja2/nodes.py, the nodes the parser builds), held in
// one arena: nodes refer to each other by index, so building, walking and destroying a tree
// never recurses. Node 0 is the template (its body in `list`).
//
// Thread-compatible; a Tree is immutable once the parser returns it.
#ifndef CKPTSCAN_CORE_JINJA_AST_H_
#define CKPTSCAN_CORE_JINJA_AST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/jinja/lexer.h"

namespace ckptscan::jinja {

inline constexpr uint32_t kNoNode = UINT32_MAX;

enum class NodeKind : uint8_t {
  // Statements. `list` is the body unless said otherwise.
  kTemplate,
  kOutput,       // list: the expressions and TemplateData nodes printed
  kFor,          // a: target, b: iterable, c: test (or kNoNode), list: body, list2: else
  kIf,           // a: test, list: body, list2: elif If nodes, list3: else
  kMacro,        // text: name, list2: parameters (Name), list3: defaults (aligned to the end)
  kCallBlock,    // a: the Call, list2: parameters, list3: defaults
  kFilterBlock,  // a: the Filter (its `a` is kNoNode: the body is filtered)
  kWith,         // list2: targets, list3: values
  kAssign,       // a: target, b: value
  kAssignBlock,  // a: target, b: Filter or kNoNode
  kBlock,        // text: name
  kExtends,      // a: template
  kInclude,      // a: template
  kImport,       // a: template, text: target
  kFromImport,   // a: template, names: imported names (target, alias)
  kScope,        // {% autoescape %}: a: the option's expression
  kBreak,
  kContinue,
  kGeneration,  // transformers' {% generation %} (a call block around its body)
  // Expressions.
  kName,          // text: name; flags: kStore / kParam when assigned
  kNSRef,         // text: namespace name, text2: attribute (an assignment target)
  kConst,         // const_type, text (str), integer
  kTemplateData,  // text: the data under a default Environment, text2: under trim_blocks
  kTuple,         // list: items
  kList,          // list: items
  kDict,          // list: Pair nodes
  kPair,          // a: key, b: value
  kKeyword,       // text: key, a: value
  kCondExpr,      // a: test, b: expr1 (if true), c: expr2 (or kNoNode)
  kBinOp,         // op, a, b: + - * / // % **
  kConcat,        // list: operands of ~
  kCompare,       // a: expr, list: Operand nodes
  kOperand,       // op (one of the compare token types, or kIn / kNotIn), a: expr
  kNot,
  kNeg,
  kPos,
  kAnd,  // a, b
  kOr,   // a, b
  kGetattr,  // a: object, text: attribute
  kGetitem,  // a: object, b: key (a Slice or an expression)
  kSlice,    // a: start, b: stop, c: step (each may be kNoNode)
  kCall,     // a: callee, list: args, list2: Keyword nodes, b: *args, c: **kwargs
  kFilter,   // a: value (kNoNode in a filter block or set block), text: name, args as kCall
  kTest,     // a: value, text: name, args as kCall
};

// kOperand's op for `in` / `not in` (the others are the comparison token types).
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLtEq, kGt, kGtEq, kIn, kNotIn };

enum class ConstType : uint8_t { kNone, kBool, kInt, kBigInt, kFloat, kStr };

struct Node {
  NodeKind kind = NodeKind::kTemplate;
  uint32_t offset = 0;  // the first byte of the construct in the template text
  uint32_t end = 0;     // one past its last byte (expressions)
  uint32_t a = kNoNode, b = kNoNode, c = kNoNode;
  Tok op = Tok::kEof;           // kBinOp
  CompareOp cmp = CompareOp::kEq;  // kOperand
  ConstType const_type = ConstType::kNone;
  bool flag = false;   // kBool's value; kFor: recursive; kBlock: scoped; kInclude: ignore missing
  int64_t integer = 0;
  std::string text;
  std::string text2;
  std::vector<uint32_t> list, list2, list3;
  std::vector<std::pair<std::string, std::string>> names;  // kFromImport
};

struct Tree {
  std::vector<Node> nodes;  // nodes[0] is the kTemplate
};

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_AST_H_
