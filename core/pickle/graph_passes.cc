// The VM's passes over one pickle's whole value graph: the expanded-size bound checked at STOP
// and the pruning of what the stream built and threw away.
#include "core/pickle/graph_passes.h"

#include <utility>
#include <vector>

namespace ckptscan::pickle::internal {

bool ExpandedSizeExceeds(const Graph& g, uint64_t cap) {
  const NodeList& nodes = g.nodes;
  std::vector<uint64_t> size(nodes.size(), 1);
  auto add = [&](NodeId id, NodeId child, uint64_t* s) {
    uint64_t c = child < id ? size[child] : 1;
    *s = (*s > cap || c > cap - *s) ? cap + 1 : *s + c;
  };
  for (NodeId id = 0; id < nodes.size(); ++id) {
    uint64_t s = 1;
    for (NodeId child : nodes[id].items) add(id, child, &s);
    if (nodes[id].kind == Kind::kCall) {
      const CallSite& c = g.calls[nodes[id].ref];
      if (c.args != kNoNode) add(id, c.args, &s);
      if (c.kwargs != kNoNode) add(id, c.kwargs, &s);
    }
    size[id] = s;
    if (s > cap) return true;
  }
  return false;
}

// The values dropped are what the stream built and threw away (popped, or left on the stack of
// a pickle that failed); CPython frees them too. The facts handed on, and the frame to the
// trusted side, then grow with what a loader keeps, not with what a stream discards: 20
// million lists built and popped leave a handful of nodes, not 20 million to encode.
void PruneUnobserved(PickleFacts* facts) {
  Graph& g = facts->graph;
  const size_t n = g.nodes.size();
  std::vector<uint8_t> keep(n, 0);
  std::vector<NodeId> work;
  size_t kept = 0;
  auto mark = [&](NodeId id) {
    if (id < n && keep[id] == 0) {
      keep[id] = 1;
      ++kept;
      work.push_back(id);
    }
  };
  mark(facts->root);
  for (const CallSite& c : g.calls) {
    mark(c.callee);
    mark(c.args);
    mark(c.kwargs);
    mark(c.result);
  }
  for (size_t id = 0; id < n; ++id) {
    Kind k = g.nodes[id].kind;
    if (k == Kind::kStr || k == Kind::kBytes || k == Kind::kByteArray) {
      mark(static_cast<NodeId>(id));
    }
  }
  while (!work.empty()) {
    NodeId id = work.back();
    work.pop_back();
    for (NodeId item : g.nodes[id].items) mark(item);
    for (NodeId state : g.nodes[id].states) mark(state);
  }
  if (kept == n) return;
  std::vector<NodeId> remap(n, kNoNode);
  NodeList nodes;
  for (size_t id = 0; id < n; ++id) {
    if (keep[id] == 0) continue;
    remap[id] = static_cast<NodeId>(nodes.size());
    nodes.push_back(std::move(g.nodes[id]));
  }
  g.nodes = std::move(nodes);
  auto re = [&](NodeId id) { return id < n ? remap[id] : id; };
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    Node& node = g.nodes[id];
    for (NodeId& item : node.items) item = re(item);
    for (NodeId& state : node.states) state = re(state);
  }
  for (CallSite& c : g.calls) {
    c.callee = re(c.callee);
    c.args = re(c.args);
    c.kwargs = re(c.kwargs);
    c.result = re(c.result);
  }
  facts->root = re(facts->root);
}

}  // namespace ckptscan::pickle::internal
