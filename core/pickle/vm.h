// The symbolic pickle VM: a model of CPython's C unpickler (Modules/_pickle.c) for protocols
// 0-5 — or of the pure-Python one (Loader below) — that records what loading would import and
// call, and never imports or calls anything.
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
#include "core/pickle/limits.h"

namespace ckptscan::pickle {

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

// Which unpickler's reading to model.
//
// kPickle: pickle.load, CPython's C unpickler (Modules/_pickle.c), as above.
// kPython: pickle._Unpickler, the pure-Python unpickler of Lib/pickle.py (3.11 and 3.13 read
// alike), which reads on where the C one stops: INST imports its class before it looks for its
// MARK; a text line at the end of the data needs no '\n' (readline()[:-1] then drops its last
// byte: a GLOBAL imports the truncated name); INT, LONG, GET and PUT are Python's int() and FLOAT
// Python's float() of the line (whitespace, '_', inf on overflow); framing is pickle.py's
// _Unframer (a FRAME longer than the data is a frame of what is left; crossing a frame end is
// its own error, not a stricter rule of ours); REDUCE and NEWOBJ take any iterable as
// arguments; BUILD on a plain value passes when its state is falsy; a persistent id stops it
// (it has no persistent_load). docs/pickle_vm.md lists each difference.
// kJoblib: joblib.load's NumpyUnpickler, a pickle._Unpickler (kPython) with one departure
// (joblib/numpy_pickle.py NumpyUnpickler.load_build): after the BUILD of a
// joblib.numpy_pickle.NumpyArrayWrapper, the array's bytes follow in the stream (after an
// optional alignment pad) and are read raw; an object array is instead a whole pickle read by
// a nested pickle.load (the C unpickler). Those bytes are skipped (numeric) or scanned as a
// pickle of the stream (object), exactly where joblib reads them.
enum class Loader : uint8_t { kPickle, kPython, kJoblib };

// Which top-level pickles of a stream ScanStream reads: all of them, one after another (as
// repeated pickle.load calls, and torch's legacy format, read them), or the first only (one
// Unpickler.load(): what joblib.load reads of a file; nothing after its STOP is trailing).
enum class Pickles : uint8_t { kAll, kFirst };

class Vm final {
 public:
  explicit Vm(Limits limits = {}, Loader loader = Loader::kPickle)
      : limits_(limits), loader_(loader) {}

  // Runs one pickle starting at data[0] (absolute offset `base_offset`) through STOP. The
  // returned facts' `end` says where it stopped.
  PickleFacts RunOne(std::string_view data, uint64_t base_offset = 0,
                     const TraceSink* trace = nullptr) const;

  // Scans every pickle in `data`: after each STOP, if bytes remain, another pickle is tried;
  // bytes that do not form one are reported as trailing (Pickles::kFirst: the first pickle
  // only, and no trailing bytes). Then byte strings inside the pickles
  // that are themselves pickles are scanned (bounded by max_nested_depth/max_nested_bytes).
  StreamFacts ScanStream(std::string_view data, uint64_t base_offset = 0,
                         const TraceSink* trace = nullptr, Pickles which = Pickles::kAll) const;

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
