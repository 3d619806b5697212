// Consistency of a value graph that crossed a process boundary.
//
// The jailed worker builds Graphs; the trusted side (the facts decoder, the rules) must not
// trust them. FindInconsistency finds the first id that refers to nothing, so that callers can
// index the graph afterwards without bounds checks of their own. Thread-safe: pure function.
#ifndef CKPTSCAN_CORE_PICKLE_GRAPH_CHECK_H_
#define CKPTSCAN_CORE_PICKLE_GRAPH_CHECK_H_

#include <optional>
#include <string>

#include "core/pickle/facts.h"

namespace ckptscan::pickle {

// The first id in `g` that refers to nothing (a node's ref/items/states/mutations, a call's
// callee/args/kwargs/result, a call without the operands its op needs), described in a few
// words; nullopt when the graph is consistent. O(nodes + items + calls).
std::optional<std::string> FindInconsistency(const Graph& g);

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_GRAPH_CHECK_H_
