// Private to core/pickle: joblib.load's one departure from pickle.load, read off the value
// graph (joblib 1.2 NumpyUnpickler.load_build, numpy 1.24). After every BUILD joblib checks
// whether the object is a NumpyArrayWrapper placeholder; if so, the array's bytes follow in
// the stream and joblib reads them there. This file decides, from the graph alone, whether
// and what joblib reads; the VM (vm.cc, Loader::kJoblib) reads those bytes from its input.
#ifndef CKPTSCAN_CORE_PICKLE_JOBLIB_ARRAYS_H_
#define CKPTSCAN_CORE_PICKLE_JOBLIB_ARRAYS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/pickle/facts.h"

namespace ckptscan::pickle::internal {

// Ends every error for a joblib reading this model does not follow.
inline constexpr char kJoblibReadsOn[] =
    " (joblib.load reads on here; ckptscan does not follow it)";

// The error for a joblib reading this model does not follow (VmError::Code::kStricter):
// "joblib array: <why>" and kJoblibReadsOn.
absl::Status JoblibNotModelled(std::string_view why);

// What joblib reads from the stream right after the BUILD of a NumpyArrayWrapper.
struct JoblibInlineArray {
  // dtype.hasobject: the bytes are a whole pickle, read by a nested pickle.load.
  bool has_object = false;
  // An object array with allow_mmap set: joblib.load(mmap_mode=...) maps its bytes raw too.
  bool mapped_too = false;
  // numpy_array_alignment_bytes is set: a one-byte pad length and the pad come first.
  bool aligned = false;
  // A numeric array's element count (the shape's product) and item size. Their product, the
  // data's length, may overflow: the reader checks it after the pad, where joblib would.
  uint64_t count = 1;
  uint64_t itemsize = 0;
};

// What joblib.load does after BUILD set `state` on `inst` (a node of `g`, of an opaque kind):
// nullopt when it reads nothing more from the stream (an NDArrayWrapper or ZNDArrayWrapper made
// as joblib 0.9 wrote it, whose array is in a file beside the pickle: joblib_companions.h); the
// array it reads inline for a NumpyArrayWrapper made as joblib.dump writes it (NEWOBJ with no
// arguments, one BUILD with a dict state); a JoblibNotModelled error for any other object that
// could be a placeholder, since reading on would skip bytes differently from joblib.
absl::StatusOr<std::optional<JoblibInlineArray>> JoblibAfterBuild(const Graph& g, NodeId inst,
                                                                  NodeId state);

}  // namespace ckptscan::pickle::internal

#endif  // CKPTSCAN_CORE_PICKLE_JOBLIB_ARRAYS_H_
