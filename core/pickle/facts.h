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

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
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
  // kStr/kBytes/kByteArray: whether `text` is a prefix of the value (see `text`).
  bool truncated = false;
  // Whether the value is exactly the stream bytes [data_offset, data_offset + len) (see below).
  bool in_stream = false;
  // kGlobal: index into Graph::globals. kCall/kPersistent: index into Graph::calls of the
  // call that produced it.
  uint32_t ref = 0;
  // Containers: nesting depth as built (an empty container is 1, a scalar 0): 1 + the deepest
  // item when it was created or last appended to. Exact for values built bottom-up, as every
  // pickler writes them; a lower bound when an already nested container is appended to
  // afterwards. Bounded by Limits::max_value_depth.
  uint32_t depth = 0;
  absl::int128 i = 0;
  double f = 0;
  // kStr: UTF-8 (lone surrogates as 3-byte sequences). kBytes/kByteArray: raw bytes.
  // Stored whole up to Limits::max_kept_string; `len` is always the full length and
  // `truncated` says whether `text` is a prefix.
  uint64_t len = 0;
  // Where the value's bytes start in the stream (kBytes/kStr/kByteArray). When `in_stream`,
  // the value is exactly the stream bytes [data_offset, data_offset + len) (binary opcodes),
  // which lets nested-pickle scanning read it whole even when `text` is truncated.
  uint64_t data_offset = 0;
  std::string text;
  // Containers: tuple/list/set/frozenset items; dict: k0, v0, k1, v1, ... in insertion order
  // (a repeated key appears again; consumers apply Python's overwrite rule).
  // kPersistent: items[0] is the pid.
  std::vector<NodeId> items;
  // BUILD states applied to this object, in order (kCall/kGlobal targets).
  std::vector<NodeId> states;
  // SETITEM(S)/APPEND(S)/ADDITEMS applied to a non-container (kCall target): the call sites.
  std::vector<uint32_t> mutations;
  // kList/kDict/kSet: the offset of the last APPEND(S)/SETITEM(S)/ADDITEMS that put items into
  // it after it was made (0: none did). A call that took it as an argument at an earlier offset
  // saw fewer items than `items` holds (OrderedDict(list), Counter(dict) copy them).
  uint64_t filled_at = 0;
};

// The nodes of a graph, in chunks of kChunkNodes: growing never moves or copies the nodes past
// the first chunk, so a graph near Limits::max_nodes costs its nodes and at most one chunk
// more, not the 2-3x of a doubling vector's reallocation. The first chunk grows like a vector
// (a stream of ten thousand one-value pickles costs ten thousand small graphs, not ten thousand
// chunks). The vector-like subset the code uses.
class NodeList {
 public:
  static constexpr size_t kChunkNodes = 4096;

  NodeList() = default;
  NodeList(const NodeList& other) { *this = other; }
  NodeList& operator=(const NodeList& other) {
    if (this == &other) return *this;
    clear();
    for (const Node& n : other) push_back(n);
    return *this;
  }
  NodeList(NodeList&&) noexcept = default;
  NodeList& operator=(NodeList&&) noexcept = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Node& operator[](size_t i) {
    return i < kChunkNodes ? head_[i] : tail_[i / kChunkNodes - 1][i % kChunkNodes];
  }
  const Node& operator[](size_t i) const {
    return i < kChunkNodes ? head_[i] : tail_[i / kChunkNodes - 1][i % kChunkNodes];
  }
  Node& back() { return (*this)[size_ - 1]; }
  const Node& back() const { return (*this)[size_ - 1]; }
  Node& emplace_back() {
    if (size_ < kChunkNodes) {
      ++size_;
      return head_.emplace_back();
    }
    if (size_ == (tail_.size() + 1) * kChunkNodes) {
      tail_.push_back(std::make_unique<Node[]>(kChunkNodes));
    }
    return (*this)[size_++];
  }
  void push_back(Node n) { emplace_back() = std::move(n); }
  // Grows with default nodes or drops the last ones (whole chunks are freed).
  void resize(size_t n) {
    while (size_ < n) emplace_back();
    while (size_ > n && size_ > kChunkNodes) (*this)[--size_] = Node();
    if (size_ > n) {
      head_.resize(n);
      size_ = n;
    }
    tail_.resize(size_ > kChunkNodes ? (size_ - 1) / kChunkNodes : 0);
  }
  void clear() {
    head_.clear();
    tail_.clear();
    size_ = 0;
  }

  template <typename List, typename Value>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Node;
    using difference_type = std::ptrdiff_t;
    using pointer = Value*;
    using reference = Value&;
    Iter(List* list, size_t i) : list_(list), i_(i) {}
    reference operator*() const { return (*list_)[i_]; }
    pointer operator->() const { return &(*list_)[i_]; }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    bool operator!=(const Iter& o) const { return i_ != o.i_; }

   private:
    List* list_;
    size_t i_;
  };
  using iterator = Iter<NodeList, Node>;
  using const_iterator = Iter<const NodeList, const Node>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  std::vector<Node> head_;                      // nodes [0, kChunkNodes)
  std::vector<std::unique_ptr<Node[]>> tail_;   // chunk k holds [(k+1), (k+2)) * kChunkNodes
  size_t size_ = 0;
};

// kDynamic: a STACK_GLOBAL whose module or name is not a str literal but a value computed at
// load time (a call's result): the loader imports whatever that value turns out to be.
enum class Via : uint8_t { kGlobal, kStackGlobal, kInst, kExt, kDynamic };
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
  // Via::kDynamic only: module/name hold the operand's text where it is a str literal and are
  // empty where it is computed; which of the two were computed.
  bool module_computed = false;
  bool name_computed = false;
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
  NodeList nodes;
  std::vector<GlobalRef> globals;
  std::vector<CallSite> calls;

  const Node& at(NodeId id) const { return nodes[id]; }
};

// An error that stopped the VM. Findings gathered before it stay valid.
// kMalformed: the real unpickler (CPython's _pickle.c) stops here too, with that error.
// kUnsupported: a construct the real loaders reject as well, that we name as unsupported
// (NEXT_BUFFER: no loader we model passes out-of-band buffers).
// kLimit: one of our Limits; the real unpickler would read on.
// kStricter: a rule of ours that CPython 3.11 does not enforce (framing), so it would read on.
struct VmError {
  enum class Code : uint8_t { kMalformed, kLimit, kUnsupported, kStricter };
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
  // For a reading by another loader than the format's own (torch::MemberFacts::alternative):
  // whether each pickle ends where that loader ends (AlternativeStopIsClean). A stop on a
  // limit or a stricter rule of ours is not such an end: the loader reads on, into bytes we
  // never judged.
  bool StopsWhereLoaderStops() const;
};

// Whether the real unpickler raises this error at the same point (see VmError::Code).
bool LoaderStopsToo(const VmError& e);

// Whether pickle `i` of an alternative reading (bytes that a loader other than the format's
// own would read as a pickle) ends where that loader ends: it has no error, or an error the
// unpickler raises too (LoaderStopsToo), or — for the first pickle — any error at or after its
// first persistent id. Every loader that reads such bytes as a pickle reads the first pickle
// without a persistent_load function (pickle.load, numpy.load, joblib's unpickler, and
// torch.load's legacy magic-number load) and so stops there, before the id's line is even
// read (_pickle.c load_persid).
bool AlternativeStopIsClean(const StreamFacts& s, size_t i);

// Renders a bounded, single-line Python-like summary of a value: strings truncated, depth and
// total length capped, globals as module.name, call results as callee(args). Never recurses
// deeper than a small fixed depth, so attacker-built nesting cannot exhaust the stack.
std::string Summarize(const Graph& g, NodeId id, size_t max_chars = 160);
// "module.name(args...)" for a call site.
std::string SummarizeCall(const Graph& g, const CallSite& c, size_t max_chars = 200);

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_FACTS_H_
