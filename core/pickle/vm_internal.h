// Private to core/pickle: what the VM's files share. The opcode machine of vm.cc runs one
// pickle (RunPickle); vm_stream.cc drives it over a stream and its nested pickles;
// joblib_arrays.cc reads the same value kinds; framed_input.cc hits the same limits.
#ifndef CKPTSCAN_CORE_PICKLE_VM_INTERNAL_H_
#define CKPTSCAN_CORE_PICKLE_VM_INTERNAL_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/limit_status.h"
#include "core/pickle/facts.h"
#include "core/pickle/limits.h"
#include "core/pickle/vm.h"

namespace ckptscan::pickle::internal {

// Kinds whose objects are known not to be callable / not types / not tuples.
inline bool IsPlainData(Kind k) {
  switch (k) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kStr:
    case Kind::kBytes:
    case Kind::kByteArray:
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kSet:
    case Kind::kFrozenSet:
    case Kind::kBuffer:
      return true;
    default:
      return false;
  }
}

// Objects of unknown type (built by a call, named by a global, loaded persistently).
inline bool IsOpaque(Kind k) { return !IsPlainData(k); }

// The error for a VM limit that was hit (VmError::Code::kLimit, naming the limit).
inline absl::Status LimitExceeded(const char* name, uint64_t value) {
  return base::LimitError(absl::StrFormat("limit %s (%d) exceeded", name, value), name, value);
}

// Runs one pickle starting at data[0] (absolute offset `base`) through STOP, with the
// opcode machine of vm.cc. `pickle_index` and `depth` label the facts and trace events
// (depth: how deep among nested pickles); `joblib_depth` counts the object-array pickles
// joblib.load reads inside one another (bounded by max_nested_depth).
PickleFacts RunPickle(const Limits& limits, std::string_view data, uint64_t base,
                      const TraceSink* trace, uint32_t pickle_index, uint32_t depth,
                      Loader loader = Loader::kPickle, uint32_t joblib_depth = 0);

}  // namespace ckptscan::pickle::internal

#endif  // CKPTSCAN_CORE_PICKLE_VM_INTERNAL_H_
