#include "rules/facts_view.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/escape.h"
#include "core/pickle/opcodes.h"

namespace ckptscan::rules::internal {

using pickle::CallOp;
using pickle::Graph;
using pickle::Kind;
using pickle::kNoNode;
using pickle::Node;
using pickle::NodeId;

const Node* NodeAt(const Graph& g, NodeId id) {
  if (id == kNoNode || id >= g.nodes.size()) return nullptr;
  return &g.nodes[id];
}

std::optional<std::string> FindInconsistency(const Graph& g) {
  const size_t nodes = g.nodes.size();
  auto bad_node = [nodes](NodeId id) { return id != kNoNode && id >= nodes; };
  for (size_t i = 0; i < nodes; ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == Kind::kGlobal && n.ref >= g.globals.size()) {
      return absl::StrCat("node ", i, " names global ", n.ref, " of ", g.globals.size());
    }
    if ((n.kind == Kind::kCall || n.kind == Kind::kPersistent) && n.ref >= g.calls.size()) {
      return absl::StrCat("node ", i, " names call site ", n.ref, " of ", g.calls.size());
    }
    for (NodeId item : n.items) {
      if (item >= nodes) return absl::StrCat("node ", i, " holds node ", item, " of ", nodes);
    }
    for (NodeId state : n.states) {
      if (state >= nodes) return absl::StrCat("node ", i, " has BUILD state node ", state);
    }
    for (uint32_t m : n.mutations) {
      if (m >= g.calls.size()) return absl::StrCat("node ", i, " names call site ", m);
    }
  }
  for (size_t i = 0; i < g.calls.size(); ++i) {
    const pickle::CallSite& c = g.calls[i];
    if (bad_node(c.callee) || bad_node(c.args) || bad_node(c.kwargs) || bad_node(c.result)) {
      return absl::StrCat("call site ", i, " refers to a node out of range");
    }
    switch (c.op) {
      case CallOp::kReduce:
      case CallOp::kNewObj:
      case CallOp::kNewObjEx:
        if (c.callee == kNoNode || c.args == kNoNode) {
          return absl::StrCat("call site ", i, " has no callee or arguments");
        }
        break;
      case CallOp::kObj:
      case CallOp::kInst:
      case CallOp::kBuild:
      case CallOp::kSetItems:
      case CallOp::kAppends:
      case CallOp::kAddItems:
        if (c.callee == kNoNode) return absl::StrCat("call site ", i, " has no callee/target");
        break;
      case CallOp::kPersistentLoad:
        if (c.args == kNoNode) return absl::StrCat("call site ", i, " has no persistent id");
        break;
      default:
        return absl::StrCat("call site ", i, " has an unknown operation");
    }
  }
  return std::nullopt;
}

void AppendSanitized(std::string* out, std::string_view s, bool escape_backslash) {
  base::AppendEscaped(out, s, {.escape_backslash = escape_backslash});
}

std::string Sanitized(std::string_view s, size_t max_bytes, bool escape_backslash) {
  std::string out;
  AppendSanitized(&out, s.substr(0, max_bytes), escape_backslash);
  if (s.size() > max_bytes) out += "…";
  return out;
}

std::string ShownName(std::string_view s) { return Sanitized(s, kMaxShownName); }

std::string GlobalName(const pickle::GlobalRef& ref) {
  return absl::StrCat(ShownName(ref.resolved_module), ".", ShownName(ref.resolved_name));
}

std::string GlobalName(const Graph& g, const Node& n) {
  if (n.kind != Kind::kGlobal || n.ref >= g.globals.size()) return "";
  const pickle::GlobalRef& ref = g.globals[n.ref];
  if (ref.via == pickle::Via::kExt) return absl::StrCat("<ext ", ref.ext_code, ">");
  return GlobalName(ref);
}

std::string OpcodeName(uint8_t op) {
  if (const char* name = pickle::OpName(op); name != nullptr) return name;
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", op);
  return buf;
}

}  // namespace ckptscan::rules::internal
