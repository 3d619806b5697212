// The symbolic pickle VM: a model of CPython's C unpickler (Modules/_pickle.c) for protocols
// 0-5 that records what loading would import and call, and never imports or calls anything.
//
// Fidelity: opcodes, argument grammars (text INT/LONG/FLOAT/GET/PUT literals included), the
// stack with its MARK fence, the metastack and the memo (MEMOIZE indexes by memo length) behave
// as in _pickle.c. Framing is enforced strictly (PEP 3154, as fixed CPython does): no argument
// or line may cross a frame end and no FRAME may start inside an unfinished frame.
// Departures, all fail-closed, are listed in docs/pickle_vm.md.
//
// Every resource is bounded by Limits; hitting one stops the VM with VmError::Code::kLimit
// naming the limit. No recursion on input-controlled depth.
//
// Thread-safe: a Vm is immutable; Run/ScanStream may be called concurrently.
//
//   pickle::Vm vm(pickle::Limits{});
//   pickle::StreamFacts facts = vm.ScanStream(bytes);
#ifndef CKPTSCAN_CORE_PICKLE_VM_H_
#define CKPTSCAN_CORE_PICKLE_VM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/pickle/facts.h"

namespace ckptscan::pickle {

// Named, configurable limits. Defaults suit multi-GB checkpoints on a worker with a few GiB.
struct Limits {
  uint64_t max_opcodes = 50'000'000;       // opcodes executed per pickle
  // Items on the stack. The picklers batch APPENDS/SETITEMS by 1,000, so only a tuple or a
  // crafted stream holds more than a few thousand.
  uint64_t max_stack_depth = 1'000'000;
  uint64_t max_mark_depth = 100'000;       // nesting depth: MARKs open at once (metastack)
  uint64_t max_memo_entries = 5'000'000;   // memo entries set
  uint64_t max_memo_index = 1ull << 26;    // a PUT index (CPython sizes its memo array by it)
  // Values built (graph nodes) per pickle, live at once: ~160 bytes each, so 4M is ~640 MB
  // of the worker (docs/pickle_vm.md, "Memory"). The facts frame holds at most 8M values.
  uint64_t max_nodes = 4'000'000;
  // Values the loaded object would hold if shared references were copied out (a DUP/memo
  // fan-out "billion laughs" is cheap for us but blows up whoever walks the result).
  uint64_t max_expanded_values = 100'000'000;
  // Nesting depth of one value (Node::depth). pickle.dump recurses per level and stops near
  // Python's recursion limit (1,000 by default), so deeper values are crafted.
  uint64_t max_value_depth = 10'000;
  uint64_t max_string_bytes = 4ull << 30;  // declared length of one str/bytes argument
  uint64_t max_line_bytes = 1ull << 20;    // one text-argument line (protocol 0 opcodes)
  uint64_t max_total_bytes = 1ull << 40;   // bytes of one stream
  uint64_t max_kept_string = 64 << 10;     // bytes of a str/bytes value kept for analysis
  uint32_t max_pickles = 10'000;           // pickles in one stream
  uint32_t max_nested_depth = 3;           // byte strings that are pickles, inside pickles
  uint64_t max_nested_bytes = 64ull << 20; // total bytes re-scanned as nested pickles
};

// One executed opcode, for the disassembler.
struct TraceEvent {
  uint64_t offset = 0;
  uint8_t opcode = 0;
  std::string arg;   // the argument as decoded ("" when none)
  std::string note;  // what it produced: "global posix.system", "call posix.system('id')"
  uint32_t mark_depth = 0;
  uint32_t pickle_index = 0;
  uint32_t nested_depth = 0;
};
using TraceSink = std::function<void(const TraceEvent&)>;

// Which loader's reading to model. kJoblib adds joblib.load's one departure from pickle.load
// (joblib/numpy_pickle.py NumpyUnpickler.load_build): after the BUILD of a
// joblib.numpy_pickle.NumpyArrayWrapper, the array's bytes follow in the stream (after an
// optional alignment pad) and are read raw; an object array is instead a whole pickle read by
// a nested pickle.load. Those bytes are skipped (numeric) or scanned as a pickle of the
// stream (object), exactly where joblib reads them.
enum class Loader : uint8_t { kPickle, kJoblib };

class Vm final {
 public:
  explicit Vm(Limits limits = {}, Loader loader = Loader::kPickle)
      : limits_(limits), loader_(loader) {}

  // Runs one pickle starting at data[0] (absolute offset `base_offset`) through STOP. The
  // returned facts' `end` says where it stopped.
  PickleFacts RunOne(std::string_view data, uint64_t base_offset = 0,
                     const TraceSink* trace = nullptr) const;

  // Scans every pickle in `data`: after each STOP, if bytes remain, another pickle is tried;
  // bytes that do not form one are reported as trailing. Then byte strings inside the pickles
  // that are themselves pickles are scanned (bounded by max_nested_depth/max_nested_bytes).
  StreamFacts ScanStream(std::string_view data, uint64_t base_offset = 0,
                         const TraceSink* trace = nullptr) const;

  // The nested-pickle pass of ScanStream on its own, for container readers that run the
  // stream's pickles themselves (e.g. torch's legacy format): tries every string value of the
  // pickles already in `facts` as a pickle, appending the ones that are. `data` is the stream
  // the pickles' offsets refer to, starting at `base_offset`.
  void ScanNested(std::string_view data, uint64_t base_offset, StreamFacts* facts,
                  const TraceSink* trace = nullptr) const;

  const Limits& limits() const { return limits_; }
  Loader loader() const { return loader_; }

 private:
  Limits limits_;
  Loader loader_;
};

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_VM_H_
