#include "core/pickle/graph_check.h"

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace ckptscan::pickle {

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
    const CallSite& c = g.calls[i];
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

}  // namespace ckptscan::pickle
