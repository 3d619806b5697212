// The opcode machine of the symbolic pickle VM (vm.h): one pickle, run opcode by opcode as
// Modules/_pickle.c's load() would, with its input and PEP 3154 framing, the stack with its
// MARK fence, the memo, and the facts (globals, call sites, values) each opcode records.
// The stream around it (several pickles, trailing bytes, nested pickles) is vm_stream.cc;
// what joblib.load reads after a BUILD is decided in joblib_arrays.cc and read here.
#include "core/pickle/vm.h"

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "core/pickle/compat_names.h"
#include "core/pickle/framed_input.h"
#include "core/pickle/graph_passes.h"
#include "core/pickle/joblib_arrays.h"
#include "core/pickle/literals.h"
#include "core/pickle/opcodes.h"
#include "core/pickle/vm_internal.h"

namespace ckptscan::pickle::internal {
namespace {

std::string QuoteForTrace(std::string_view s, size_t max = 80) {
  std::string out = "'";
  for (char c : s.substr(0, max)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\' && c != '\'') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    }
  }
  if (s.size() > max) absl::StrAppend(&out, "...");
  out += "'";
  return out;
}

// Executes one pickle. Single use.
class Machine final {
 public:
  Machine(const Limits& limits, std::string_view data, uint64_t base, const TraceSink* trace,
          uint32_t pickle_index, uint32_t depth, Loader loader = Loader::kPickle,
          uint32_t joblib_depth = 0)
      : limits_(limits),
        in_(limits, data, base, loader == Loader::kPickle ? Framing::kStrict : Framing::kUnframer),
        trace_(trace),
        pickle_index_(pickle_index),
        depth_(depth),
        loader_(loader),
        python_(loader != Loader::kPickle),
        joblib_depth_(joblib_depth) {
    out_.start = base;
    out_.depth = depth;
  }

  PickleFacts Run() && {
    absl::Status st = Loop();
    // The next load reads on from here: after STOP for _pickle.c, after the frame STOP lies in
    // for pickle.py.
    out_.end = python_ && st.ok() ? in_.file_offset() : in_.offset();
    if (!st.ok()) {
      VmError e;
      e.code = st.code() == absl::StatusCode::kResourceExhausted ? VmError::Code::kLimit
               : st.code() == absl::StatusCode::kUnimplemented ? VmError::Code::kUnsupported
               : st.code() == absl::StatusCode::kFailedPrecondition ? VmError::Code::kStricter
                                                                    : VmError::Code::kMalformed;
      e.message = std::string(st.message());
      e.offset = op_offset_;
      e.opcode = op_;
      e.has_opcode = have_op_;
      if (std::optional<base::LimitHit> hit = base::LimitOf(st)) {
        e.limit_name = std::move(hit->name);
        e.limit_value = hit->value;
      }
      out_.error = std::move(e);
    }
    stack_ = {};
    memo_ = {};
    PruneUnobserved(&out_);
    return std::move(out_);
  }

 private:
  // ---- errors ----
  absl::Status Malformed(std::string msg) const {
    return absl::InvalidArgumentError(std::move(msg));
  }
  // A rule of ours that the real loader does not enforce (VmError::kStricter): it reads on.
  absl::Status Stricter(std::string msg) const {
    return absl::FailedPreconditionError(std::move(msg));
  }
  static absl::Status Limit(const char* name, uint64_t value) { return LimitExceeded(name, value); }
  absl::Status Underflow() const {
    return Malformed(marks_.empty() ? "unpickling stack underflow" : "unexpected MARK found");
  }

  // ---- input: in_, with PEP 3154 framing enforced (framed_input.h) ----
  // A declared length for a str/bytes argument: checked against the limit and the input
  // before anything is read or allocated.
  absl::Status CheckLength(uint64_t n) {
    if (n > limits_.max_string_bytes) return Limit("max_string_bytes", limits_.max_string_bytes);
    return absl::OkStatus();
  }

  // ---- values ----
  NodeId New(Kind k) {
    out_.graph.nodes.emplace_back();
    out_.graph.nodes.back().kind = k;
    return static_cast<NodeId>(out_.graph.nodes.size() - 1);
  }
  Node& N(NodeId id) { return out_.graph.nodes[id]; }

  NodeId NewInt(const IntValue& v) {
    NodeId id = New(v.is_bool ? Kind::kBool : Kind::kInt);
    Node& n = N(id);
    if (v.is_bool) {
      n.b = v.value != 0;
    } else {
      n.fits = v.fits;
      n.i = v.value;
      n.text = v.text;
    }
    return id;
  }
  NodeId NewSmallInt(int64_t x) {
    IntValue v;
    v.value = x;
    v.text = absl::StrCat(x);
    return NewInt(v);
  }

  // A str/bytes value. `raw` is the stream bytes when they are the value itself.
  NodeId NewText(Kind k, std::string value, uint64_t data_offset, bool in_stream) {
    NodeId id = New(k);
    Node& n = N(id);
    n.len = value.size();
    n.data_offset = data_offset;
    n.in_stream = in_stream;
    uint64_t keep = k == Kind::kStr ? limits_.max_kept_string : std::min<uint64_t>(
                                                                    limits_.max_kept_string, 256);
    if (value.size() > keep) {
      value.resize(keep);
      n.truncated = true;
    }
    n.text = std::move(value);
    return id;
  }
  NodeId NewRawText(Kind k, std::string_view raw, uint64_t data_offset) {
    uint64_t keep = k == Kind::kStr ? limits_.max_kept_string : std::min<uint64_t>(
                                                                    limits_.max_kept_string, 256);
    NodeId id = New(k);
    Node& n = N(id);
    n.len = raw.size();
    n.data_offset = data_offset;
    n.in_stream = true;
    n.truncated = raw.size() > keep;
    n.text = std::string(raw.substr(0, keep));
    return id;
  }

  NodeId NewContainer(Kind k, std::vector<NodeId> items) {
    NodeId id = New(k);
    Node& n = N(id);
    Deepen(n, items);
    n.items = std::move(items);
    return id;
  }
  // Items put into a container (new, or already built): it is now at least one deeper than
  // the deepest of them, and an empty new container is 1 deep.
  void Deepen(Node& container, const std::vector<NodeId>& items) {
    uint32_t d = 0;
    for (NodeId item : items) d = std::max(d, N(item).depth);
    if (d >= container.depth) container.depth = d + 1;
    max_depth_ = std::max(max_depth_, container.depth);
  }
  // None, True and False are immutable singletons in Python too: one node each per pickle,
  // so a stream of them costs no graph memory.
  NodeId Singleton(NodeId& slot, Kind k, bool b) {
    if (slot == kNoNode) {
      slot = New(k);
      N(slot).b = b;
    }
    return slot;
  }

  // ---- stack (with _pickle.c's MARK fence) ----
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  void Push(NodeId id) { stack_.push_back(id); }

  absl::StatusOr<NodeId> Pop() {
    if (stack_.size() <= fence()) return Underflow();
    NodeId id = stack_.back();
    stack_.pop_back();
    return id;
  }

  absl::StatusOr<size_t> Marker() {
    if (marks_.empty()) return Malformed("could not find MARK");
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  absl::StatusOr<std::vector<NodeId>> PopItems(size_t start) {
    if (start < fence() || start > stack_.size()) return Underflow();
    std::vector<NodeId> items(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
    stack_.resize(start);
    return items;
  }

  // ---- memo ----
  absl::Status MemoPut(uint64_t idx, NodeId value) {
    if (idx >= limits_.max_memo_index) return Limit("max_memo_index", limits_.max_memo_index);
    auto it = memo_.find(idx);
    if (it != memo_.end()) {
      it->second = value;
      return absl::OkStatus();
    }
    if (memo_.size() >= limits_.max_memo_entries) {
      return Limit("max_memo_entries", limits_.max_memo_entries);
    }
    memo_.emplace(idx, value);
    return absl::OkStatus();
  }
  absl::Status MemoGet(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) {
      return Malformed(absl::StrFormat("Memo value not found at index %d", idx));
    }
    Push(it->second);
    note_ = absl::StrCat("memo[", idx, "]");
    return absl::OkStatus();
  }
  absl::Status PutTop(uint64_t idx) {
    if (stack_.size() <= fence()) return Underflow();
    note_ = absl::StrCat("memo[", idx, "]");
    return MemoPut(idx, stack_.back());
  }

  // ---- facts ----
  NodeId AddGlobal(std::string module, std::string name, Via via, int64_t ext_code = 0) {
    GlobalRef g;
    g.module = std::move(module);
    g.name = std::move(name);
    g.offset = op_offset_;
    g.opcode = op_;
    g.via = via;
    g.ext_code = ext_code;
    if (via == Via::kExt || via == Via::kDynamic) {
      g.resolved_module = g.module;
      g.resolved_name = g.name;
    } else {
      ResolveCompatNames(proto_, &g);
    }
    out_.graph.globals.push_back(std::move(g));
    NodeId id = New(Kind::kGlobal);
    N(id).ref = static_cast<uint32_t>(out_.graph.globals.size() - 1);
    if (trace_ != nullptr) {
      const GlobalRef& gr = out_.graph.globals.back();
      note_ = via == Via::kExt       ? absl::StrCat("global <extension code ", ext_code, ">")
              : via == Via::kDynamic ? std::string("global <computed at load time>")
                                     : absl::StrCat("global ", gr.resolved_module, ".",
                                                    gr.resolved_name);
    }
    return id;
  }

  // Records a call site; returns the node pushed for its result (kNoNode for mutations).
  NodeId AddCall(CallOp op, NodeId callee, NodeId args, NodeId kwargs, Kind result_kind) {
    CallSite c;
    c.op = op;
    c.offset = op_offset_;
    c.opcode = op_;
    c.callee = callee;
    c.args = args;
    c.kwargs = kwargs;
    out_.graph.calls.push_back(c);
    uint32_t index = static_cast<uint32_t>(out_.graph.calls.size() - 1);
    NodeId result = kNoNode;
    if (result_kind == Kind::kCall || result_kind == Kind::kPersistent) {
      result = New(result_kind);
      N(result).ref = index;
      if (result_kind == Kind::kPersistent) N(result).items.push_back(args);
      out_.graph.calls[index].result = result;
    } else if (callee != kNoNode) {
      N(callee).mutations.push_back(index);
    }
    if (trace_ != nullptr) {
      note_ = absl::StrCat("call ", SummarizeCall(out_.graph, out_.graph.calls[index], 120));
    }
    return result;
  }

  // The bound on the graph's fan-out (graph_passes.h), checked at STOP.
  absl::Status CheckExpandedSize() {
    if (ExpandedSizeExceeds(out_.graph, limits_.max_expanded_values)) {
      return Limit("max_expanded_values", limits_.max_expanded_values);
    }
    return absl::OkStatus();
  }

  // ---- joblib's inline arrays: reading the bytes joblib_arrays.h says joblib reads ----
  absl::Status ReadJoblibArray(const JoblibInlineArray& array) {
    in_.LeaveFrameIfDone();
    if (in_.in_frame()) {
      // joblib reads the array from the file, past the frame the unpickler still reads from.
      return JoblibNotModelled("array data inside an unfinished frame");
    }
    if (array.has_object) {
      // joblib.load(mmap_mode=...) maps such an array's bytes raw when allow_mmap is set, and
      // joblib.load() unpickles them: two readings of the same bytes. The pickle is scanned,
      // then the reading stops.
      // joblib: pickle.load(file) — a separate pickle (its own memo) at this offset, read by
      // the C unpickler, which knows nothing of placeholders.
      if (joblib_depth_ >= limits_.max_nested_depth) {
        return Limit("max_nested_depth", limits_.max_nested_depth);
      }
      std::string_view rest = in_.Peek();
      PickleFacts inner = Machine(limits_, rest, in_.offset(), trace_, pickle_index_, 0,
                                  Loader::kPickle, joblib_depth_ + 1)
                              .Run();
      const uint64_t used = inner.end - in_.offset();
      std::optional<VmError> error = inner.error;
      out_.inline_pickles.push_back(std::move(inner));
      if (error) {
        std::string msg =
            absl::StrCat("joblib array: the object array's pickle failed: ", error->message);
        return LoaderStopsToo(*error) ? Malformed(std::move(msg))
                                      : Stricter(absl::StrCat(msg, kJoblibReadsOn));
      }
      if (array.mapped_too) {
        return JoblibNotModelled("an object array with allow_mmap (read raw under mmap_mode)");
      }
      note_ = absl::StrCat("joblib object array: a pickle of ", used, " bytes");
      return in_.Skip(used);
    }
    if (array.aligned) {
      CKPT_ASSIGN_OR_RETURN(uint64_t pad, in_.ReadUInt(1));
      CKPT_RETURN_IF_ERROR(in_.Read(pad).status());
    }
    uint64_t nbytes;
    if (!base::CheckedMul(array.count, array.itemsize, &nbytes)) {
      return JoblibNotModelled("array size overflows");
    }
    CKPT_RETURN_IF_ERROR(CheckLength(nbytes));
    CKPT_RETURN_IF_ERROR(in_.Read(nbytes).status());
    note_ = absl::StrCat("joblib array data: ", nbytes, " bytes");
    return absl::OkStatus();
  }

  bool Unhashable(NodeId id) {
    Kind k = N(id).kind;
    if (k == Kind::kList || k == Kind::kDict || k == Kind::kSet || k == Kind::kByteArray) {
      return true;
    }
    if (k == Kind::kTuple) {
      for (NodeId item : N(id).items) {
        Kind ik = N(item).kind;
        if (ik == Kind::kList || ik == Kind::kDict || ik == Kind::kSet ||
            ik == Kind::kByteArray) {
          return true;
        }
      }
    }
    return false;
  }
  absl::Status CheckHashable(NodeId id) {
    if (Unhashable(id)) {
      return Malformed(absl::StrCat("unhashable type: '", KindName(N(id).kind), "'"));
    }
    return absl::OkStatus();
  }

  // ---- the opcode loop ----
  absl::Status Loop() {
    while (true) {
      in_.LeaveFrameIfDone();
      op_offset_ = in_.offset();
      have_op_ = false;
      if (in_.remaining() == 0) {
        return Malformed(out_.opcodes == 0 ? "Ran out of input" : "pickle data was truncated");
      }
      op_ = *in_.ReadU8();
      have_op_ = true;
      if (++out_.opcodes > limits_.max_opcodes) return Limit("max_opcodes", limits_.max_opcodes);
      note_.clear();
      arg_.clear();
      bool stop = false;
      CKPT_RETURN_IF_ERROR(Step(&stop));
      if (stack_.size() > limits_.max_stack_depth) {
        return Limit("max_stack_depth", limits_.max_stack_depth);
      }
      if (out_.graph.nodes.size() > limits_.max_nodes) {
        return Limit("max_nodes", limits_.max_nodes);
      }
      if (max_depth_ > limits_.max_value_depth) {
        return Limit("max_value_depth", limits_.max_value_depth);
      }
      if (trace_ != nullptr) {
        TraceEvent ev;
        ev.offset = op_offset_;
        ev.opcode = op_;
        ev.arg = arg_;
        ev.note = note_;
        ev.mark_depth = static_cast<uint32_t>(marks_.size());
        ev.pickle_index = pickle_index_;
        ev.nested_depth = depth_;
        (*trace_)(ev);
      }
      if (stop) return absl::OkStatus();
    }
  }

  absl::Status PushStr(std::string_view raw, uint64_t off, bool utf8_surrogatepass) {
    if (utf8_surrogatepass && !IsValidUtf8(raw, true)) {
      return Malformed("'utf-8' codec can't decode the argument (invalid UTF-8)");
    }
    if (trace_ != nullptr) arg_ = QuoteForTrace(raw);
    Push(NewRawText(Kind::kStr, raw, off));
    return absl::OkStatus();
  }

  // Python 2 str (STRING/BINSTRING/SHORT_BINSTRING): decoded as text; non-ASCII bytes are
  // taken as Latin-1 (what torch/numpy loaders pass as encoding) rather than failing.
  void PushPy2Str(std::string bytes, uint64_t off, bool in_stream) {
    if (trace_ != nullptr) arg_ = QuoteForTrace(bytes);
    bool ascii = true;
    for (char c : bytes) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) {
      Push(NewText(Kind::kStr, std::move(bytes), off, in_stream));
    } else {
      Push(NewText(Kind::kStr, Latin1ToUtf8(bytes), off, false));
    }
  }

  absl::Status PushBytes(Kind k, uint64_t n) {
    CKPT_RETURN_IF_ERROR(CheckLength(n));
    uint64_t off = in_.offset();
    CKPT_ASSIGN_OR_RETURN(std::string_view raw, in_.Read(n));
    if (trace_ != nullptr) arg_ = absl::StrCat("b", QuoteForTrace(raw, 40), " (", n, " bytes)");
    Push(NewRawText(k, raw, off));
    return absl::OkStatus();
  }

  // A GLOBAL/INST name line without its '\n'. _pickle.c refuses a line shorter than two bytes
  // or one the data ends in; pickle.py takes readline()[:-1] of whatever readline() returns: an
  // empty line, or at the end of the data the rest of it less its last byte (and it imports
  // what that names).
  absl::StatusOr<std::string_view> ReadNameLine() {
    if (python_) return PyLine();
    CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
    if (line.size() < 2) return Malformed("pickle data was truncated (empty line)");
    return line.substr(0, line.size() - 1);
  }

  // pickle.py's readline()[:-1]: the line without its last byte, whatever that byte is (the
  // '\n', or at the end of the data the line's own last byte).
  absl::StatusOr<std::string_view> PyLine() {
    CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
    return line.substr(0, line.empty() ? 0 : line.size() - 1);
  }

  // Whether a value of a plain kind is false in Python (None, False, 0, empty), true, or
  // unknown (an object built at load time, a memoryview).
  enum class Truth : uint8_t { kFalse, kTrue, kUnknown };
  Truth Truthiness(NodeId id) {
    const Node& n = N(id);
    switch (n.kind) {
      case Kind::kNone:
        return Truth::kFalse;
      case Kind::kBool:
        return n.b ? Truth::kTrue : Truth::kFalse;
      case Kind::kInt:
        return !n.fits || n.i != 0 ? Truth::kTrue : Truth::kFalse;
      case Kind::kFloat:
        return n.f != 0 ? Truth::kTrue : Truth::kFalse;  // NaN is true
      case Kind::kStr:
      case Kind::kBytes:
      case Kind::kByteArray:
        return n.len != 0 ? Truth::kTrue : Truth::kFalse;
      case Kind::kTuple:
      case Kind::kList:
      case Kind::kDict:
      case Kind::kSet:
      case Kind::kFrozenSet:
        return n.items.empty() ? Truth::kFalse : Truth::kTrue;
      default:
        return Truth::kUnknown;
    }
  }

  // pickle.py's GET and PUT index: int(readline()[:-1]) (base 10; Python's int has no bound:
  // one beyond int64 is clamped, which no memo index reaches).
  absl::StatusOr<int64_t> PyMemoIndex() {
    CKPT_ASSIGN_OR_RETURN(std::string_view val, PyLine());
    CKPT_ASSIGN_OR_RETURN(IntValue v, PyIntFromBytes(val, 10));
    const size_t sign = val.find_first_not_of(" \t\n\r\x0b\x0c");
    const bool neg = v.fits ? v.value < 0 : sign != std::string_view::npos && val[sign] == '-';
    if (!v.fits || v.value > absl::int128(INT64_MAX) || v.value < absl::int128(INT64_MIN)) {
      return neg ? INT64_MIN : INT64_MAX;
    }
    return static_cast<int64_t>(v.value);
  }

  // pickle._Unpickler.persistent_load raises (neither it nor joblib's subclass defines one).
  absl::Status NoPersistentLoad() { return Malformed("unsupported persistent id encountered"); }

  // pickle.py's f(*args): any iterable value will do (REDUCE, NEWOBJ, NEWOBJ_EX).
  absl::Status CheckIterable(NodeId args, const char* what) {
    const Kind k = N(args).kind;
    if (k == Kind::kNone || k == Kind::kBool || k == Kind::kInt || k == Kind::kFloat) {
      return Malformed(
          absl::StrCat(what, ": argument after * must be an iterable, not ", KindName(k)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadAsciiLine(const char* what) {
    CKPT_ASSIGN_OR_RETURN(std::string_view s, ReadNameLine());
    for (char c : s) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        return Malformed(absl::StrCat("'ascii' codec can't decode the ", what, " name"));
      }
    }
    return std::string(s);
  }

  absl::StatusOr<std::string> ReadUtf8Line(const char* what) {
    CKPT_ASSIGN_OR_RETURN(std::string_view s, ReadNameLine());
    if (!IsValidUtf8(s, false)) {
      return Malformed(absl::StrCat("'utf-8' codec can't decode the ", what, " name"));
    }
    return std::string(s);
  }

  absl::Status DoAppend(int64_t x, bool single) {
    const int64_t len = static_cast<int64_t>(stack_.size());
    if (x > len || x <= static_cast<int64_t>(fence())) return Underflow();
    NodeId target = stack_[x - 1];
    Kind k = N(target).kind;
    if (len == x) {
      // _pickle.c does nothing with no items; pickle.py's load_appends looks up extend (then
      // append) all the same, which only lists, bytearrays and objects have.
      if (python_ && k != Kind::kList && k != Kind::kByteArray && !IsOpaque(k)) {
        return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute 'append'"));
      }
      return absl::OkStatus();
    }
    CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(static_cast<size_t>(x)));
    if (k == Kind::kList) {
      Node& list = N(target);
      Deepen(list, items);
      list.filled_at = op_offset_;
      list.items.insert(list.items.end(), items.begin(), items.end());
      return absl::OkStatus();
    }
    if (IsOpaque(k) || k == Kind::kByteArray) {
      NodeId args = NewContainer(Kind::kTuple, std::move(items));
      AddCall(CallOp::kAppends, target, args, kNoNode, Kind::kNone);
      return absl::OkStatus();
    }
    return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute '",
                                  single ? "append" : "extend", "'"));
  }

  absl::Status DoSetItems(int64_t x) {
    const int64_t len = static_cast<int64_t>(stack_.size());
    if (x > len || x <= static_cast<int64_t>(fence())) return Underflow();
    if (len == x) return absl::OkStatus();
    if ((len - x) % 2 != 0) return Malformed("odd number of items for SETITEMS");
    NodeId target = stack_[x - 1];
    CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(static_cast<size_t>(x)));
    Kind k = N(target).kind;
    if (k == Kind::kDict) {
      for (size_t i = 0; i < items.size(); i += 2) CKPT_RETURN_IF_ERROR(CheckHashable(items[i]));
      Node& dict = N(target);
      Deepen(dict, items);
      dict.filled_at = op_offset_;
      dict.items.insert(dict.items.end(), items.begin(), items.end());
      return absl::OkStatus();
    }
    if (IsOpaque(k) || k == Kind::kList || k == Kind::kByteArray) {
      NodeId args = NewContainer(Kind::kTuple, std::move(items));
      AddCall(CallOp::kSetItems, target, args, kNoNode, Kind::kNone);
      return absl::OkStatus();
    }
    return Malformed(
        absl::StrCat("'", KindName(k), "' object does not support item assignment"));
  }

  absl::Status CheckCallable(NodeId callee) {
    if (IsPlainData(N(callee).kind)) {
      return Malformed(absl::StrCat("'", KindName(N(callee).kind), "' object is not callable"));
    }
    return absl::OkStatus();
  }
  absl::Status CheckArgsTuple(NodeId args, const char* what) {
    Kind k = N(args).kind;
    if (k != Kind::kTuple && IsPlainData(k)) {
      return Malformed(absl::StrCat(what, " args argument must be a tuple, not ", KindName(k)));
    }
    return absl::OkStatus();
  }

  absl::Status Step(bool* stop) {
    switch (op_) {
      case PROTO: {
        CKPT_ASSIGN_OR_RETURN(uint64_t v, in_.ReadUInt(1));
        arg_ = absl::StrCat(v);
        if (v > static_cast<uint64_t>(kHighestProtocol)) {
          return Malformed(absl::StrFormat("unsupported pickle protocol: %d", v));
        }
        proto_ = static_cast<int>(v);
        if (out_.protocol < 0) out_.protocol = proto_;
        return absl::OkStatus();
      }
      case FRAME: {
        CKPT_ASSIGN_OR_RETURN(uint64_t size, in_.ReadUInt(8));
        arg_ = absl::StrCat(size);
        if (size > static_cast<uint64_t>(INT64_MAX)) {
          return Malformed("FRAME length exceeds system's maximum");
        }
        return in_.StartFrame(size);
      }
      case STOP: {
        CKPT_ASSIGN_OR_RETURN(NodeId v, Pop());
        out_.root = v;
        *stop = true;
        return CheckExpandedSize();
      }
      case MARK:
        if (marks_.size() >= limits_.max_mark_depth) {
          return Limit("max_mark_depth", limits_.max_mark_depth);
        }
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case POP:
        if (!marks_.empty() && marks_.back() == stack_.size()) {
          marks_.pop_back();
        } else if (stack_.size() <= fence()) {
          return Underflow();
        } else {
          stack_.pop_back();
        }
        return absl::OkStatus();
      case POP_MARK: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        stack_.resize(m);
        return absl::OkStatus();
      }
      case DUP:
        if (stack_.size() <= fence()) return Underflow();
        Push(stack_.back());
        return absl::OkStatus();
      case NONE: Push(Singleton(none_, Kind::kNone, false)); return absl::OkStatus();
      case NEWTRUE: Push(Singleton(true_, Kind::kBool, true)); return absl::OkStatus();
      case NEWFALSE: Push(Singleton(false_, Kind::kBool, false)); return absl::OkStatus();
      case INT: {
        CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
        IntValue v;
        if (python_) {
          // load_int: the whole line; exactly b"00\n" and b"01\n" are False and True.
          if (line == "00\n" || line == "01\n") {
            v.is_bool = true;
            v.value = line[1] == '1' ? 1 : 0;
          } else {
            CKPT_ASSIGN_OR_RETURN(v, PyIntFromBytes(line, 0));
          }
        } else {
          CKPT_ASSIGN_OR_RETURN(v, ParseIntLine(line));
        }
        arg_ = v.is_bool ? (v.value != 0 ? "True" : "False") : v.text;
        Push(NewInt(v));
        return absl::OkStatus();
      }
      case BININT: {
        CKPT_ASSIGN_OR_RETURN(uint64_t v, in_.ReadUInt(4));
        int64_t x = static_cast<int32_t>(static_cast<uint32_t>(v));
        arg_ = absl::StrCat(x);
        Push(NewSmallInt(x));
        return absl::OkStatus();
      }
      case BININT1:
      case BININT2: {
        CKPT_ASSIGN_OR_RETURN(uint64_t v, in_.ReadUInt(op_ == BININT1 ? 1 : 2));
        arg_ = absl::StrCat(v);
        Push(NewSmallInt(static_cast<int64_t>(v)));
        return absl::OkStatus();
      }
      case LONG: {
        IntValue v;
        if (python_) {
          // load_long: readline()[:-1], one trailing 'L' dropped, int(val, 0).
          CKPT_ASSIGN_OR_RETURN(std::string_view val, PyLine());
          if (!val.empty() && val.back() == 'L') val.remove_suffix(1);
          CKPT_ASSIGN_OR_RETURN(v, PyIntFromBytes(val, 0));
        } else {
          CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
          CKPT_ASSIGN_OR_RETURN(v, ParseLongLine(line));
        }
        arg_ = v.text;
        Push(NewInt(v));
        return absl::OkStatus();
      }
      case LONG1:
      case LONG4: {
        uint64_t n;
        if (op_ == LONG1) {
          CKPT_ASSIGN_OR_RETURN(n, in_.ReadUInt(1));
        } else {
          CKPT_ASSIGN_OR_RETURN(uint64_t raw, in_.ReadUInt(4));
          int32_t sn = static_cast<int32_t>(static_cast<uint32_t>(raw));
          if (sn < 0) return Malformed("LONG pickle has negative byte count");
          n = static_cast<uint64_t>(sn);
        }
        CKPT_RETURN_IF_ERROR(CheckLength(n));
        CKPT_ASSIGN_OR_RETURN(std::string_view b, in_.Read(n));
        IntValue v = IntFromTwosComplement(b);
        arg_ = v.text;
        Push(NewInt(v));
        return absl::OkStatus();
      }
      case FLOAT: {
        double d;
        if (python_) {
          CKPT_ASSIGN_OR_RETURN(std::string_view val, PyLine());
          CKPT_ASSIGN_OR_RETURN(d, PyFloatFromBytes(val));
        } else {
          CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
          CKPT_ASSIGN_OR_RETURN(d, ParseFloatLine(line));
        }
        NodeId id = New(Kind::kFloat);
        N(id).f = d;
        arg_ = absl::StrCat(d);
        Push(id);
        return absl::OkStatus();
      }
      case BINFLOAT: {
        CKPT_ASSIGN_OR_RETURN(std::string_view b, in_.Read(8));
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<unsigned char>(b[k]);
        double d;
        std::memcpy(&d, &bits, sizeof d);
        NodeId id = New(Kind::kFloat);
        N(id).f = d;
        arg_ = absl::StrCat(d);
        Push(id);
        return absl::OkStatus();
      }
      case STRING: {
        uint64_t off = in_.offset();
        std::string_view s;
        if (python_) {
          CKPT_ASSIGN_OR_RETURN(s, PyLine());
        } else {
          CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
          if (line.size() < 2) return Malformed("pickle data was truncated (empty line)");
          s = line.substr(0, line.size() - 1);
        }
        if (s.size() < 2 || s.front() != s.back() || (s.front() != '\'' && s.front() != '"')) {
          return Malformed("the STRING opcode argument must be quoted");
        }
        CKPT_ASSIGN_OR_RETURN(std::string bytes, DecodeEscapedBytes(s.substr(1, s.size() - 2)));
        PushPy2Str(std::move(bytes), off + 1, false);
        return absl::OkStatus();
      }
      case BINSTRING:
      case SHORT_BINSTRING: {
        uint64_t n;
        if (op_ == SHORT_BINSTRING) {
          CKPT_ASSIGN_OR_RETURN(n, in_.ReadUInt(1));
        } else {
          CKPT_ASSIGN_OR_RETURN(uint64_t raw, in_.ReadUInt(4));
          int32_t sn = static_cast<int32_t>(static_cast<uint32_t>(raw));
          if (sn < 0) return Malformed("BINSTRING pickle has negative byte count");
          n = static_cast<uint64_t>(sn);
        }
        CKPT_RETURN_IF_ERROR(CheckLength(n));
        uint64_t off = in_.offset();
        CKPT_ASSIGN_OR_RETURN(std::string_view b, in_.Read(n));
        PushPy2Str(std::string(b.substr(0, std::min<uint64_t>(b.size(), limits_.max_kept_string))),
                   off, true);
        if (b.size() > limits_.max_kept_string) {
          N(stack_.back()).len = b.size();
          N(stack_.back()).truncated = true;
        }
        return absl::OkStatus();
      }
      case UNICODE: {
        uint64_t off = in_.offset();
        CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
        // pickle.py: readline()[:-1], which at the end of the data drops the line's last byte.
        CKPT_ASSIGN_OR_RETURN(std::string s, DecodeRawUnicodeEscape(line.substr(
                                                 0, line.empty() ? 0 : line.size() - 1)));
        if (trace_ != nullptr) arg_ = QuoteForTrace(s);
        Push(NewText(Kind::kStr, std::move(s), off, false));
        return absl::OkStatus();
      }
      case SHORT_BINUNICODE:
      case BINUNICODE:
      case BINUNICODE8: {
        CKPT_ASSIGN_OR_RETURN(uint64_t n, in_.ReadUInt(op_ == SHORT_BINUNICODE ? 1
                                                       : op_ == BINUNICODE     ? 4
                                                                               : 8));
        if (n > static_cast<uint64_t>(INT64_MAX)) {
          return Malformed("BINUNICODE8 exceeds system's maximum size");
        }
        CKPT_RETURN_IF_ERROR(CheckLength(n));
        uint64_t off = in_.offset();
        CKPT_ASSIGN_OR_RETURN(std::string_view b, in_.Read(n));
        return PushStr(b, off, true);
      }
      case SHORT_BINBYTES:
      case BINBYTES:
      case BINBYTES8:
      case BYTEARRAY8: {
        CKPT_ASSIGN_OR_RETURN(uint64_t n, in_.ReadUInt(op_ == SHORT_BINBYTES ? 1
                                                       : op_ == BINBYTES     ? 4
                                                                             : 8));
        if (n > static_cast<uint64_t>(INT64_MAX)) {
          return Malformed("BINBYTES8 exceeds system's maximum size");
        }
        return PushBytes(op_ == BYTEARRAY8 ? Kind::kByteArray : Kind::kBytes, n);
      }
      case NEXT_BUFFER:
        return absl::UnimplementedError(
            "pickle stream refers to out-of-band data but no *buffers* argument was given");
      case READONLY_BUFFER: {
        if (stack_.size() <= fence()) return Underflow();
        NodeId top = stack_.back();
        Kind k = N(top).kind;
        if (k == Kind::kByteArray || IsOpaque(k)) {
          NodeId view = New(Kind::kBuffer);
          N(view).items.push_back(top);
          stack_.back() = view;
        } else if (k != Kind::kBytes && k != Kind::kBuffer) {
          return Malformed(absl::StrCat("a bytes-like object is required, not '", KindName(k),
                                        "'"));
        }
        return absl::OkStatus();
      }
      case EMPTY_TUPLE: Push(NewContainer(Kind::kTuple, {})); return absl::OkStatus();
      case EMPTY_LIST: Push(NewContainer(Kind::kList, {})); return absl::OkStatus();
      case EMPTY_DICT: Push(NewContainer(Kind::kDict, {})); return absl::OkStatus();
      case EMPTY_SET: Push(NewContainer(Kind::kSet, {})); return absl::OkStatus();
      case TUPLE: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        Push(NewContainer(Kind::kTuple, std::move(items)));
        return absl::OkStatus();
      }
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        size_t n = op_ - TUPLE1 + 1;
        if (stack_.size() < n) return Underflow();
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(stack_.size() - n));
        Push(NewContainer(Kind::kTuple, std::move(items)));
        return absl::OkStatus();
      }
      case LIST: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        Push(NewContainer(Kind::kList, std::move(items)));
        return absl::OkStatus();
      }
      case DICT: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        if ((stack_.size() - m) % 2 != 0) return Malformed("odd number of items for DICT");
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        for (size_t i = 0; i < items.size(); i += 2) CKPT_RETURN_IF_ERROR(CheckHashable(items[i]));
        Push(NewContainer(Kind::kDict, std::move(items)));
        return absl::OkStatus();
      }
      case FROZENSET: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        for (NodeId item : items) CKPT_RETURN_IF_ERROR(CheckHashable(item));
        Push(NewContainer(Kind::kFrozenSet, std::move(items)));
        return absl::OkStatus();
      }
      case ADDITEMS: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        const size_t len = stack_.size();
        if (m > len || m <= fence()) return Underflow();
        NodeId target = stack_[m - 1];
        Kind k = N(target).kind;
        if (len == m) {
          // pickle.py's load_additems looks up add on anything but a set, items or none.
          if (python_ && k != Kind::kSet && !IsOpaque(k)) {
            return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute 'add'"));
          }
          return absl::OkStatus();
        }
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        if (k == Kind::kSet) {
          for (NodeId item : items) CKPT_RETURN_IF_ERROR(CheckHashable(item));
          Node& set = N(target);
          Deepen(set, items);
          set.filled_at = op_offset_;
          set.items.insert(set.items.end(), items.begin(), items.end());
          return absl::OkStatus();
        }
        if (IsOpaque(k)) {
          NodeId args = NewContainer(Kind::kTuple, std::move(items));
          AddCall(CallOp::kAddItems, target, args, kNoNode, Kind::kNone);
          return absl::OkStatus();
        }
        return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute 'add'"));
      }
      case APPEND: return DoAppend(static_cast<int64_t>(stack_.size()) - 1, true);
      case APPENDS: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        return DoAppend(static_cast<int64_t>(m), false);
      }
      case SETITEM: return DoSetItems(static_cast<int64_t>(stack_.size()) - 2);
      case SETITEMS: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        return DoSetItems(static_cast<int64_t>(m));
      }
      case GET: {
        int64_t idx;
        if (python_) {
          CKPT_ASSIGN_OR_RETURN(idx, PyMemoIndex());
        } else {
          CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
          CKPT_ASSIGN_OR_RETURN(idx, ParseMemoIndexLine(line));
        }
        arg_ = absl::StrCat(idx);
        if (idx < 0) return Malformed(absl::StrFormat("Memo value not found at index %d", idx));
        return MemoGet(static_cast<uint64_t>(idx));
      }
      case BINGET:
      case LONG_BINGET: {
        CKPT_ASSIGN_OR_RETURN(uint64_t idx, in_.ReadUInt(op_ == BINGET ? 1 : 4));
        arg_ = absl::StrCat(idx);
        return MemoGet(idx);
      }
      case PUT: {
        int64_t idx;
        if (python_) {
          CKPT_ASSIGN_OR_RETURN(idx, PyMemoIndex());
          if (idx < 0) return Malformed("negative PUT argument");
          if (stack_.size() <= fence()) return Underflow();
        } else {
          CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
          if (line.size() < 2) return Malformed("pickle data was truncated (empty line)");
          if (stack_.size() <= fence()) return Underflow();
          CKPT_ASSIGN_OR_RETURN(idx, ParseMemoIndexLine(line));
        }
        arg_ = absl::StrCat(idx);
        if (idx < 0) return Malformed("negative PUT argument");
        return PutTop(static_cast<uint64_t>(idx));
      }
      case BINPUT:
      case LONG_BINPUT: {
        CKPT_ASSIGN_OR_RETURN(uint64_t idx, in_.ReadUInt(op_ == BINPUT ? 1 : 4));
        arg_ = absl::StrCat(idx);
        return PutTop(idx);
      }
      case MEMOIZE: {
        if (stack_.size() <= fence()) return Underflow();
        return PutTop(memo_.size());
      }
      case GLOBAL: {
        CKPT_ASSIGN_OR_RETURN(std::string module, ReadUtf8Line("module"));
        CKPT_ASSIGN_OR_RETURN(std::string name, ReadUtf8Line("global"));
        arg_ = absl::StrCat(QuoteForTrace(module), " ", QuoteForTrace(name));
        Push(AddGlobal(std::move(module), std::move(name), Via::kGlobal));
        return absl::OkStatus();
      }
      case STACK_GLOBAL: {
        CKPT_ASSIGN_OR_RETURN(NodeId name, Pop());
        CKPT_ASSIGN_OR_RETURN(NodeId module, Pop());
        const bool module_computed = IsOpaque(N(module).kind);
        const bool name_computed = IsOpaque(N(name).kind);
        if ((N(name).kind != Kind::kStr && !name_computed) ||
            (N(module).kind != Kind::kStr && !module_computed)) {
          return Malformed("STACK_GLOBAL requires str");
        }
        if (module_computed || name_computed) {
          // Operands computed at load time (a call's result may be any str): an import of a
          // name the file does not spell out.
          std::string m = module_computed ? "" : N(module).text;
          std::string n = name_computed ? "" : N(name).text;
          arg_ = absl::StrCat(module_computed ? "<computed>" : QuoteForTrace(m), " ",
                              name_computed ? "<computed>" : QuoteForTrace(n));
          NodeId id = AddGlobal(std::move(m), std::move(n), Via::kDynamic);
          GlobalRef& g = out_.graph.globals.back();
          g.module_computed = module_computed;
          g.name_computed = name_computed;
          Push(id);
          return absl::OkStatus();
        }
        std::string m = N(module).text, n = N(name).text;
        arg_ = absl::StrCat(QuoteForTrace(m), " ", QuoteForTrace(n));
        Push(AddGlobal(std::move(m), std::move(n), Via::kStackGlobal));
        return absl::OkStatus();
      }
      case INST: {
        // _pickle.c finds the MARK first; pickle._Unpickler.load_inst reads both lines and
        // imports the class before it looks for the MARK: without one, it has still imported
        // the module.
        const bool import_first = python_;
        size_t m = 0;
        if (!import_first) {
          CKPT_ASSIGN_OR_RETURN(m, Marker());
        }
        CKPT_ASSIGN_OR_RETURN(std::string module, ReadAsciiLine("module"));
        CKPT_ASSIGN_OR_RETURN(std::string name, ReadAsciiLine("class"));
        arg_ = absl::StrCat(QuoteForTrace(module), " ", QuoteForTrace(name));
        NodeId cls = AddGlobal(std::move(module), std::move(name), Via::kInst);
        if (import_first) {
          CKPT_ASSIGN_OR_RETURN(m, Marker());
        }
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m));
        NodeId args = NewContainer(Kind::kTuple, std::move(items));
        Push(AddCall(CallOp::kInst, cls, args, kNoNode, Kind::kCall));
        return absl::OkStatus();
      }
      case OBJ: {
        CKPT_ASSIGN_OR_RETURN(size_t m, Marker());
        if (stack_.size() < m + 1) return Underflow();
        CKPT_ASSIGN_OR_RETURN(std::vector<NodeId> items, PopItems(m + 1));
        CKPT_ASSIGN_OR_RETURN(NodeId cls, Pop());
        CKPT_RETURN_IF_ERROR(CheckCallable(cls));
        NodeId args = NewContainer(Kind::kTuple, std::move(items));
        Push(AddCall(CallOp::kObj, cls, args, kNoNode, Kind::kCall));
        return absl::OkStatus();
      }
      case REDUCE: {
        CKPT_ASSIGN_OR_RETURN(NodeId args, Pop());
        CKPT_ASSIGN_OR_RETURN(NodeId callee, Pop());
        CKPT_RETURN_IF_ERROR(CheckCallable(callee));
        if (python_) {
          CKPT_RETURN_IF_ERROR(CheckIterable(args, "REDUCE"));
        } else if (N(args).kind != Kind::kTuple && IsPlainData(N(args).kind)) {
          return Malformed("argument list must be a tuple");
        }
        Push(AddCall(CallOp::kReduce, callee, args, kNoNode, Kind::kCall));
        return absl::OkStatus();
      }
      case NEWOBJ:
      case NEWOBJ_EX: {
        NodeId kwargs = kNoNode;
        if (op_ == NEWOBJ_EX) {
          CKPT_ASSIGN_OR_RETURN(kwargs, Pop());
        }
        CKPT_ASSIGN_OR_RETURN(NodeId args, Pop());
        CKPT_ASSIGN_OR_RETURN(NodeId cls, Pop());
        const char* what = op_ == NEWOBJ ? "NEWOBJ" : "NEWOBJ_EX";
        if (IsPlainData(N(cls).kind)) {
          return Malformed(
              absl::StrCat(what, " class argument must be a type, not ", KindName(N(cls).kind)));
        }
        if (python_) {
          CKPT_RETURN_IF_ERROR(CheckIterable(args, what));
        } else {
          CKPT_RETURN_IF_ERROR(CheckArgsTuple(args, what));
        }
        if (kwargs != kNoNode && N(kwargs).kind != Kind::kDict && IsPlainData(N(kwargs).kind)) {
          return Malformed(absl::StrCat(what, " kwargs argument must be a dict, not ",
                                        KindName(N(kwargs).kind)));
        }
        Push(AddCall(op_ == NEWOBJ ? CallOp::kNewObj : CallOp::kNewObjEx, cls, args, kwargs,
                     Kind::kCall));
        return absl::OkStatus();
      }
      case BUILD: {
        if (static_cast<int64_t>(stack_.size()) - 2 < static_cast<int64_t>(fence())) {
          return Underflow();
        }
        CKPT_ASSIGN_OR_RETURN(NodeId state, Pop());
        NodeId inst = stack_.back();
        Kind k = N(inst).kind;
        if (IsOpaque(k)) {
          N(inst).states.push_back(state);
          AddCall(CallOp::kBuild, inst, state, kNoNode, Kind::kNone);
          if (loader_ == Loader::kJoblib) {
            CKPT_ASSIGN_OR_RETURN(std::optional<JoblibInlineArray> array,
                                  JoblibAfterBuild(out_.graph, inst, state));
            if (array.has_value()) return ReadJoblibArray(*array);
          }
          return absl::OkStatus();
        }
        // No __setstate__: a (state, slotstate) pair is split; a non-None state needs a
        // __dict__ and a non-empty slotstate needs setattr, which literals do not support.
        NodeId dict_state = state;
        NodeId slot_state = kNoNode;
        if (N(state).kind == Kind::kTuple && N(state).items.size() == 2) {
          dict_state = N(state).items[0];
          slot_state = N(state).items[1];
        }
        if (python_) {
          // load_build: `if state:` and `if slotstate:` — a false state is skipped, a true one
          // needs inst.__dict__, which no plain value has. An object's truth is unknown here:
          // it may be false, and then the load reads on.
          if (Truthiness(dict_state) == Truth::kTrue ||
              (slot_state != kNoNode && Truthiness(slot_state) == Truth::kTrue)) {
            return Malformed(
                absl::StrCat("'", KindName(k), "' object has no attribute '",
                             Truthiness(dict_state) == Truth::kTrue ? "__dict__" : "to set", "'"));
          }
          return absl::OkStatus();
        }
        if (N(dict_state).kind != Kind::kNone) {
          return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute '__dict__'"));
        }
        if (slot_state != kNoNode && N(slot_state).kind != Kind::kNone) {
          if (N(slot_state).kind != Kind::kDict && IsPlainData(N(slot_state).kind)) {
            return Malformed("slot state is not a dictionary");
          }
          if (N(slot_state).kind != Kind::kDict || !N(slot_state).items.empty()) {
            return Malformed(absl::StrCat("'", KindName(k), "' object has no attribute to set"));
          }
        }
        return absl::OkStatus();
      }
      case PERSID: {
        CKPT_ASSIGN_OR_RETURN(std::string_view line, in_.ReadLine());
        std::string_view s = line.substr(0, line.empty() ? 0 : line.size() - 1);
        for (char c : s) {
          if (static_cast<unsigned char>(c) >= 0x80) {
            return Malformed("persistent IDs in protocol 0 must be ASCII strings");
          }
        }
        if (python_) return NoPersistentLoad();
        NodeId pid = NewText(Kind::kStr, std::string(s), in_.offset() - line.size(), true);
        arg_ = QuoteForTrace(s);
        Push(AddCall(CallOp::kPersistentLoad, kNoNode, pid, kNoNode, Kind::kPersistent));
        return absl::OkStatus();
      }
      case BINPERSID: {
        CKPT_ASSIGN_OR_RETURN(NodeId pid, Pop());
        if (python_) return NoPersistentLoad();
        Push(AddCall(CallOp::kPersistentLoad, kNoNode, pid, kNoNode, Kind::kPersistent));
        return absl::OkStatus();
      }
      case EXT1:
      case EXT2:
      case EXT4: {
        int64_t code;
        if (op_ == EXT4) {
          CKPT_ASSIGN_OR_RETURN(uint64_t raw, in_.ReadUInt(4));
          code = static_cast<int32_t>(static_cast<uint32_t>(raw));
        } else {
          CKPT_ASSIGN_OR_RETURN(uint64_t raw, in_.ReadUInt(op_ == EXT1 ? 1 : 2));
          code = static_cast<int64_t>(raw);
        }
        arg_ = absl::StrCat(code);
        if (code <= 0) return Malformed("EXT specifies code <= 0");
        // The copyreg extension registry of the loading process is unknown: record the
        // reference (never SAFE) and go on, so that later findings are not lost.
        Push(AddGlobal("", "", Via::kExt, code));
        return absl::OkStatus();
      }
      default:
        return Malformed(absl::StrFormat("invalid load key, 0x%02x", op_));
    }
  }

  const Limits& limits_;
  FramedInput in_;
  const TraceSink* trace_;
  uint32_t pickle_index_;
  uint32_t depth_;
  uint32_t max_depth_ = 0;  // the deepest Node::depth so far
  NodeId none_ = kNoNode;
  NodeId true_ = kNoNode;
  NodeId false_ = kNoNode;
  Loader loader_;
  bool python_;  // pickle.py's _Unpickler (kPython, and joblib's subclass of it)
  uint32_t joblib_depth_;

  PickleFacts out_;
  std::vector<NodeId> stack_;
  std::vector<size_t> marks_;
  absl::flat_hash_map<uint64_t, NodeId> memo_;
  int proto_ = 0;

  uint64_t op_offset_ = 0;
  uint8_t op_ = 0;
  bool have_op_ = false;
  std::string arg_;
  std::string note_;
};

}  // namespace

PickleFacts RunPickle(const Limits& limits, std::string_view data, uint64_t base,
                      const TraceSink* trace, uint32_t pickle_index, uint32_t depth, Loader loader,
                      uint32_t joblib_depth) {
  return Machine(limits, data, base, trace, pickle_index, depth, loader, joblib_depth).Run();
}

}  // namespace ckptscan::pickle::internal
