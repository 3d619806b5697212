#include "core/pickle/joblib_companions.h"

namespace ckptscan::pickle {

bool IsJoblibCompanionWrapper(const GlobalRef& g) {
  if (g.resolved_name != "NDArrayWrapper" && g.resolved_name != "ZNDArrayWrapper") return false;
  return g.resolved_module == "joblib.numpy_pickle" ||
         g.resolved_module == "joblib.numpy_pickle_compat" ||
         g.resolved_module == "sklearn.externals.joblib.numpy_pickle" ||
         g.resolved_module == "sklearn.externals.joblib.numpy_pickle_compat";
}

std::vector<JoblibCompanion> JoblibCompanions(const Graph& g, size_t max) {
  std::vector<JoblibCompanion> out;
  for (const CallSite& c : g.calls) {
    if (out.size() >= max) break;
    if (c.op != CallOp::kBuild || c.callee >= g.nodes.size() || c.args >= g.nodes.size()) {
      continue;
    }
    const Node& target = g.nodes[c.callee];
    if (target.kind != Kind::kCall || target.ref >= g.calls.size()) continue;
    const NodeId callee = g.calls[target.ref].callee;
    if (callee >= g.nodes.size() || g.nodes[callee].kind != Kind::kGlobal ||
        g.nodes[callee].ref >= g.globals.size()) {
      continue;
    }
    const GlobalRef& ref = g.globals[g.nodes[callee].ref];
    if (!IsJoblibCompanionWrapper(ref)) continue;
    const Node& state = g.nodes[c.args];
    if (state.kind != Kind::kDict) continue;
    NodeId filename = kNoNode;
    for (size_t i = 0; i + 1 < state.items.size(); i += 2) {
      const NodeId k = state.items[i];
      if (k < g.nodes.size() && g.nodes[k].kind == Kind::kStr && g.nodes[k].text == "filename") {
        filename = state.items[i + 1];  // the last one wins, as in a dict
      }
    }
    if (filename >= g.nodes.size() || g.nodes[filename].kind != Kind::kStr) continue;
    const Node& name = g.nodes[filename];
    out.push_back(JoblibCompanion{name.text, name.truncated, ref.resolved_name == "NDArrayWrapper",
                                  c.offset});
  }
  return out;
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace ckptscan::pickle
