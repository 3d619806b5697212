// Facts produced by the symbolic pickle VM (core/pickle/vm.h).
//
// The VM never imports or calls anything. It keeps a value graph of what the real unpickler
// would build: every pushed value is a Node in an arena (Graph), referred to by NodeId; memo
// entries and DUP share ids, so nothing is ever copied (no billion-laughs blow-up), and
// destroying a graph is flat (no recursion). Globals and call sites are listed in stream order.
//
// Thread-compatible: a Facts object is built by one VM run and read-only afterwards.
#ifndef CKPTSCAN_CORE_PICKLE_FACTS_H_
#define CKPTSCAN_CORE_PICKLE_FACTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"

namespace ckptscan::pickle {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = UINT32_MAX;

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kByteArray,
  kTuple,
  kList,
  kDict,
  kSet,
  kFrozenSet,
  kGlobal,      // the object named by GLOBAL/STACK_GLOBAL/INST/EXT (see Graph::globals)
  kCall,        // the result of a call site (see Graph::calls); also INST/OBJ instances
  kPersistent,  // the result of persistent_load(pid)
  kBuffer,      // READONLY_BUFFER view of a bytearray
};

const char* KindName(Kind k);

struct Node {
  Kind kind = Kind::kNone;
  // kBool: value. kInt: `fits` says whether `i` holds the exact value (else it is wider than
  // 128 bits and only `text` is meaningful).
  bool b = false;
  bool fits = true;
  absl::int128 i = 0;
  double f = 0;
  // kStr: UTF-8 (lone surrogates as 3-byte sequences). kBytes/kByteArray: raw bytes.
  // Stored whole up to Limits::max_kept_string; `len` is always the full length and
  // `truncated` says whether `text` is a prefix.
  std::string text;
  uint64_t len = 0;
  bool truncated = false;
  // Where the value's bytes start in the stream (kBytes/kStr/kByteArray). When `in_stream`,
  // the value is exactly the stream bytes [data_offset, data_offset + len) (binary opcodes),
  // which lets nested-pickle scanning read it whole even when `text` is truncated.
  uint64_t data_offset = 0;
  bool in_stream = false;
  // Containers: tuple/list/set/frozenset items; dict: k0, v0, k1, v1, ... in insertion order
  // (a repeated key appears again; consumers apply Python's overwrite rule).
  // kPersistent: items[0] is the pid.
  std::vector<NodeId> items;
  // kGlobal: index into Graph::globals. kCall/kPersistent: index into Graph::calls of the
  // call that produced it.
  uint32_t ref = 0;
  // BUILD states applied to this object, in order (kCall/kGlobal targets).
  std::vector<NodeId> states;
  // SETITEM(S)/APPEND(S)/ADDITEMS applied to a non-container (kCall target): the call sites.
  std::vector<uint32_t> mutations;
};

enum class Via : uint8_t { kGlobal, kStackGlobal, kInst, kExt };
const char* ViaName(Via v);

struct GlobalRef {
  // As written in the stream (what find_class receives).
  std::string module;
  std::string name;
  // After CPython's protocol < 3 fix_imports mapping (_compat_pickle); equal to module/name
  // when no mapping applies.
  std::string resolved_module;
  std::string resolved_name;
  uint64_t offset = 0;
  uint8_t opcode = 0;
  Via via = Via::kGlobal;
  int64_t ext_code = 0;  // Via::kExt only; module/name are empty (the registry is unknown)
};

enum class CallOp : uint8_t {
  kReduce,
  kNewObj,
  kNewObjEx,
  kObj,
  kInst,
  kBuild,           // target.__setstate__(state) or __dict__ update
  kSetItems,        // SETITEM/SETITEMS on something that is not a plain dict
  kAppends,         // APPEND/APPENDS on something that is not a plain list
  kAddItems,        // ADDITEMS on something that is not a plain set
  kPersistentLoad,  // PERSID/BINPERSID
};
const char* CallOpName(CallOp op);

struct CallSite {
  CallOp op = CallOp::kReduce;
  uint64_t offset = 0;
  uint8_t opcode = 0;
  // kReduce/kNewObj/kNewObjEx/kObj/kInst: the callable. kBuild/kSetItems/kAppends/kAddItems:
  // the target object. kPersistentLoad: kNoNode.
  NodeId callee = kNoNode;
  // Positional arguments (tuple node) / BUILD state / the pid for persistent_load. For
  // SETITEMS/APPENDS: a synthetic tuple of the items.
  NodeId args = kNoNode;
  NodeId kwargs = kNoNode;  // NEWOBJ_EX
  NodeId result = kNoNode;  // the node pushed (kNoNode for BUILD/SETITEMS/APPENDS)
};

// A value graph plus what was imported and called, for one pickle.
struct Graph {
  std::vector<Node> nodes;
  std::vector<GlobalRef> globals;
  std::vector<CallSite> calls;

  const Node& at(NodeId id) const { return nodes[id]; }
};

// An error that stopped the VM. Findings gathered before it stay valid.
struct VmError {
  enum class Code : uint8_t { kMalformed, kLimit, kUnsupported };
  Code code = Code::kMalformed;
  std::string message;  // what went wrong, as _pickle.c would put it where possible
  uint64_t offset = 0;  // absolute byte offset of the opcode being executed
  uint8_t opcode = 0;
  bool has_opcode = false;
  std::string limit_name;  // kLimit only
  uint64_t limit_value = 0;
};

// One pickle (PROTO ... STOP) of a stream.
struct PickleFacts {
  uint64_t start = 0;  // absolute offset of its first opcode
  uint64_t end = 0;    // absolute offset one past STOP (or where it failed)
  int protocol = -1;   // from PROTO, -1 if none
  uint64_t opcodes = 0;
  Graph graph;
  NodeId root = kNoNode;  // the value STOP returned
  std::optional<VmError> error;
  // Depth 0 for a pickle of the stream itself; >0 for a byte string found inside another
  // pickle that parsed as a pickle. `parent` indexes StreamFacts::pickles, `parent_node` is
  // the bytes node it came from.
  uint32_t depth = 0;
  int32_t parent = -1;
  NodeId parent_node = kNoNode;
  // Loader::kJoblib only, transient: the pickles of object arrays read inline by this pickle,
  // in stream order. ScanStream moves them into StreamFacts::pickles right after this one.
  std::vector<PickleFacts> inline_pickles;
};

// Everything the VM learned from one byte stream.
struct StreamFacts {
  std::vector<PickleFacts> pickles;
  // Bytes after the last STOP that did not form another pickle.
  uint64_t trailing_offset = 0;
  uint64_t trailing_bytes = 0;
  // Stopped on a limit that applies to the whole stream (e.g. too many pickles).
  std::optional<VmError> stream_error;

  bool ok() const;  // no pickle and no stream-level error
};

// Renders a bounded, single-line Python-like summary of a value: strings truncated, depth and
// total length capped, globals as module.name, call results as callee(args). Never recurses
// deeper than a small fixed depth, so attacker-built nesting cannot exhaust the stack.
std::string Summarize(const Graph& g, NodeId id, size_t max_chars = 160);
// "module.name(args...)" for a call site.
std::string SummarizeCall(const Graph& g, const CallSite& c, size_t max_chars = 200);

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_FACTS_H_
