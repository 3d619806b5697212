#include "core/pickle/facts.h"

#include <charconv>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/strings.h"
#include "core/pickle/opcodes.h"

namespace ckptscan::pickle {

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kByteArray: return "bytearray";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kSet: return "set";
    case Kind::kFrozenSet: return "frozenset";
    case Kind::kGlobal: return "global";
    case Kind::kCall: return "call";
    case Kind::kPersistent: return "persistent";
    case Kind::kBuffer: return "buffer";
  }
  return "?";
}

const char* ViaName(Via v) {
  switch (v) {
    case Via::kGlobal: return "GLOBAL";
    case Via::kStackGlobal: return "STACK_GLOBAL";
    case Via::kInst: return "INST";
    case Via::kExt: return "EXT";
    case Via::kDynamic: return "STACK_GLOBAL";
  }
  return "?";
}

const char* CallOpName(CallOp op) {
  switch (op) {
    case CallOp::kReduce: return "REDUCE";
    case CallOp::kNewObj: return "NEWOBJ";
    case CallOp::kNewObjEx: return "NEWOBJ_EX";
    case CallOp::kObj: return "OBJ";
    case CallOp::kInst: return "INST";
    case CallOp::kBuild: return "BUILD";
    case CallOp::kSetItems: return "SETITEMS";
    case CallOp::kAppends: return "APPENDS";
    case CallOp::kAddItems: return "ADDITEMS";
    case CallOp::kPersistentLoad: return "persistent_load";
  }
  return "?";
}

bool StreamFacts::ok() const {
  if (stream_error.has_value()) return false;
  for (const PickleFacts& p : pickles) {
    if (p.error.has_value()) return false;
  }
  return true;
}

bool LoaderStopsToo(const VmError& e) {
  return e.code == VmError::Code::kMalformed || e.code == VmError::Code::kUnsupported;
}

bool AlternativeStopIsClean(const StreamFacts& s, size_t i) {
  if (i >= s.pickles.size()) return false;
  const PickleFacts& p = s.pickles[i];
  if (!p.error.has_value() || LoaderStopsToo(*p.error)) return true;
  if (i != 0 || p.depth != 0) return false;
  if (p.error->has_opcode && (p.error->opcode == PERSID || p.error->opcode == BINPERSID)) {
    return true;
  }
  for (const CallSite& c : p.graph.calls) {
    if (c.op == CallOp::kPersistentLoad && c.offset <= p.error->offset) return true;
  }
  return false;
}

bool StreamFacts::StopsWhereLoaderStops() const {
  if (stream_error.has_value() && !LoaderStopsToo(*stream_error)) return false;
  for (size_t i = 0; i < pickles.size(); ++i) {
    if (!AlternativeStopIsClean(*this, i)) return false;
  }
  return true;
}

namespace {

constexpr int kMaxDepth = 4;       // fixed, so attacker nesting cannot deepen the recursion
constexpr size_t kMaxItems = 8;    // items shown per container
constexpr size_t kMaxString = 48;  // characters shown per string

class Printer {
 public:
  Printer(const Graph& g, size_t budget) : g_(g), budget_(budget) {}

  void Value(NodeId id, int depth) {
    if (full()) return;
    if (id == kNoNode || id >= g_.nodes.size()) {
      Put("?");
      return;
    }
    const Node& n = g_.nodes[id];
    switch (n.kind) {
      case Kind::kNone: Put("None"); return;
      case Kind::kBool: Put(n.b ? "True" : "False"); return;
      case Kind::kInt: Put(n.text.empty() ? "0" : n.text); return;
      case Kind::kFloat: {
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof(buf), n.f);
        Put(std::string_view(buf, r.ptr - buf));
        return;
      }
      case Kind::kStr: Quoted("", n); return;
      case Kind::kBytes: Quoted("b", n); return;
      case Kind::kByteArray:
        Put("bytearray(");
        Quoted("b", n);
        Put(")");
        return;
      case Kind::kGlobal: {
        if (n.ref >= g_.globals.size()) {
          Put("?");
          return;
        }
        const GlobalRef& gr = g_.globals[n.ref];
        if (gr.via == Via::kExt) {
          Put(absl::StrCat("<ext ", gr.ext_code, ">"));
        } else if (gr.via == Via::kDynamic) {
          Put("<computed ");
          if (gr.module_computed) Put("?"); else Escaped(gr.resolved_module);
          Put(".");
          if (gr.name_computed) Put("?"); else Escaped(gr.resolved_name);
          Put(">");
        } else {
          Escaped(gr.resolved_module);
          Put(".");
          Escaped(gr.resolved_name);
        }
        return;
      }
      default: break;
    }
    if (depth >= kMaxDepth) {
      Put("...");
      return;
    }
    switch (n.kind) {
      case Kind::kTuple: Items("(", n.items, n.items.size() == 1 ? ",)" : ")", depth); return;
      case Kind::kList: Items("[", n.items, "]", depth); return;
      case Kind::kSet: Items("{", n.items, "}", depth); return;
      case Kind::kFrozenSet: Items("frozenset({", n.items, "})", depth); return;
      case Kind::kDict: {
        Put("{");
        for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
          if (k > 0) Put(", ");
          if (k / 2 >= kMaxItems) {
            Put("...");
            break;
          }
          Value(n.items[k], depth + 1);
          Put(": ");
          Value(n.items[k + 1], depth + 1);
        }
        Put("}");
        return;
      }
      case Kind::kCall:
        if (n.ref >= g_.calls.size()) {
          Put("?");
          return;
        }
        Call(g_.calls[n.ref], depth);
        return;
      case Kind::kPersistent:
        Put("persistent_load(");
        if (!n.items.empty()) Value(n.items[0], depth + 1);
        Put(")");
        return;
      case Kind::kBuffer:
        Put("memoryview(");
        if (!n.items.empty()) Value(n.items[0], depth + 1);
        Put(")");
        return;
      default: Put("?"); return;
    }
  }

  void Call(const CallSite& c, int depth) {
    switch (c.op) {
      case CallOp::kPersistentLoad:
        Put("persistent_load(");
        Value(c.args, depth + 1);
        Put(")");
        return;
      case CallOp::kBuild:
        Value(c.callee, depth + 1);
        Put(".__setstate__(");
        Value(c.args, depth + 1);
        Put(")");
        return;
      case CallOp::kSetItems:
      case CallOp::kAppends:
      case CallOp::kAddItems:
        Value(c.callee, depth + 1);
        Put(c.op == CallOp::kSetItems ? ".__setitem__" : c.op == CallOp::kAppends ? ".extend"
                                                                                    : ".add");
        Args(c.args, depth);
        return;
      default:
        Value(c.callee, depth + 1);
        if (c.op == CallOp::kNewObj || c.op == CallOp::kNewObjEx) Put(".__new__");
        Args(c.args, depth);
        if (c.kwargs != kNoNode) {
          Put("**");
          Value(c.kwargs, depth + 1);
        }
        return;
    }
  }

  std::string Take() {
    if (truncated_) out_ += "...";
    return std::move(out_);
  }

 private:
  bool full() const { return truncated_; }

  void Put(std::string_view s) {
    if (truncated_) return;
    if (out_.size() + s.size() > budget_) {
      out_.append(s.substr(0, budget_ > out_.size() ? budget_ - out_.size() : 0));
      truncated_ = true;
      return;
    }
    out_.append(s);
  }

  void Escaped(std::string_view s) {
    std::string e;
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      if (u < 0x20 || u == 0x7f || c == '\\' || c == '\'') {
        absl::StrAppendFormat(&e, "\\x%02x", u);
      } else {
        e.push_back(c);
      }
    }
    Put(e);
  }

  void Quoted(std::string_view prefix, const Node& n) {
    Put(prefix);
    Put("'");
    std::string_view t = n.text;
    bool cut = t.size() > kMaxString;
    Escaped(cut ? t.substr(0, kMaxString) : t);
    if (cut || n.truncated) Put(absl::StrCat("...<", n.len, " bytes>"));
    Put("'");
  }

  void Items(std::string_view open, const std::vector<NodeId>& items, std::string_view close,
             int depth) {
    Put(open);
    for (size_t k = 0; k < items.size(); ++k) {
      if (k > 0) Put(", ");
      if (k >= kMaxItems) {
        Put(absl::StrCat("...", items.size() - k, " more"));
        break;
      }
      Value(items[k], depth + 1);
    }
    Put(close);
  }

  // Call arguments: a tuple's items in parentheses; anything else as a single value.
  void Args(NodeId args, int depth) {
    if (args != kNoNode && args < g_.nodes.size() && g_.nodes[args].kind == Kind::kTuple) {
      Items("(", g_.nodes[args].items, ")", depth);
      return;
    }
    Put("(*");
    Value(args, depth + 1);
    Put(")");
  }

  const Graph& g_;
  size_t budget_;
  std::string out_;
  bool truncated_ = false;
};

}  // namespace

std::string Summarize(const Graph& g, NodeId id, size_t max_chars) {
  Printer p(g, max_chars);
  p.Value(id, 0);
  return p.Take();
}

std::string SummarizeCall(const Graph& g, const CallSite& c, size_t max_chars) {
  Printer p(g, max_chars);
  p.Call(c, 0);
  return p.Take();
}

}  // namespace ckptscan::pickle
