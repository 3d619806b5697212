// The pickle VM's limits (core/pickle/vm.h), alone: what the trusted side sets and sends to the
// worker (flags, the job message) without including the parser's header.
#ifndef CKPTSCAN_CORE_PICKLE_LIMITS_H_
#define CKPTSCAN_CORE_PICKLE_LIMITS_H_

#include <cstdint>

namespace ckptscan::pickle {

// Named, configurable limits. Defaults suit multi-GB checkpoints on a worker with a few GiB.
struct Limits {
  uint64_t max_opcodes = 50'000'000;  // opcodes executed per pickle
  // Items on the stack. The picklers batch APPENDS/SETITEMS by 1,000, so only a tuple or a
  // crafted stream holds more than a few thousand.
  uint64_t max_stack_depth = 1'000'000;
  uint64_t max_mark_depth = 100'000;      // nesting depth: MARKs open at once (metastack)
  uint64_t max_memo_entries = 5'000'000;  // memo entries set
  uint64_t max_memo_index = 1ull << 26;   // a PUT index (CPython sizes its memo array by it)
  // Values built (graph nodes) per pickle, live at once: ~160 bytes each, so 4M is ~640 MB
  // of the worker (docs/pickle_vm.md, "Memory"). The facts frame holds at most 8M values.
  uint64_t max_nodes = 4'000'000;
  // Values the loaded object would hold if shared references were copied out (a DUP/memo
  // fan-out "billion laughs" is cheap for us but blows up whoever walks the result).
  uint64_t max_expanded_values = 100'000'000;
  // Nesting depth of one value (Node::depth). pickle.dump recurses per level and stops near
  // Python's recursion limit (1,000 by default), so deeper values are crafted.
  uint64_t max_value_depth = 10'000;
  uint64_t max_string_bytes = 4ull << 30;   // declared length of one str/bytes argument
  uint64_t max_line_bytes = 1ull << 20;     // one text-argument line (protocol 0 opcodes)
  uint64_t max_total_bytes = 1ull << 40;    // bytes of one stream
  uint64_t max_kept_string = 64 << 10;      // bytes of a str/bytes value kept for analysis
  uint32_t max_pickles = 10'000;            // pickles in one stream
  uint32_t max_nested_depth = 3;            // byte strings that are pickles, inside pickles
  uint64_t max_nested_bytes = 64ull << 20;  // total bytes re-scanned as nested pickles
};

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_LIMITS_H_
