// Private to core/pickle: the passes the VM makes over one pickle's whole value graph, at its
// end: the bound on the graph's expanded size (at STOP) and the pruning of values nothing can
// observe (before the facts are handed on). Both iterative: no recursion on the graph's depth.
#ifndef CKPTSCAN_CORE_PICKLE_GRAPH_PASSES_H_
#define CKPTSCAN_CORE_PICKLE_GRAPH_PASSES_H_

#include <cstdint>

#include "core/pickle/facts.h"

namespace ckptscan::pickle::internal {

// Whether the size of the object graph, with shared references counted every time they are
// reached (saturating), exceeds `cap`. Children created after their parent (APPEND of a later
// value, cycles) count once: the bound is for fan-out, which only reaches back. O(nodes + items).
bool ExpandedSizeExceeds(const Graph& g, uint64_t cap);

// Drops the nodes nothing can observe from facts->graph: values reachable neither from the
// root nor from a call site, that are not byte strings either (nested-pickle scanning reads
// those). Order-preserving; ids (in nodes, calls and the root) are renumbered.
void PruneUnobserved(PickleFacts* facts);

}  // namespace ckptscan::pickle::internal

#endif  // CKPTSCAN_CORE_PICKLE_GRAPH_PASSES_H_
