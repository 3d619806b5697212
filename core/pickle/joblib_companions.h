// The files joblib.load reads beside a pickle for the array wrappers of joblib < 0.10, read off
// a value graph (joblib 1.2 and 1.4, joblib/numpy_pickle_compat.py).
//
// joblib 0.9 wrote each array to a file of its own next to the pickle and left a wrapper in the
// pickle: NEWOBJ of joblib.numpy_pickle.NDArrayWrapper or ZNDArrayWrapper, then one BUILD with
// a dict state naming the file. After that BUILD, joblib.load (NumpyUnpickler and the "ZF"
// loader's ZipNumpyUnpickler alike) replaces the wrapper by the array it reads from
// os.path.join(dirname(pickle), filename):
//   NDArrayWrapper   numpy.load(path, allow_pickle=True): an object array's pickle, or any file
//                    that is no .npy, is unpickled.
//   ZNDArrayWrapper  joblib's zlib file of the raw bytes, given to ndarray.__setstate__: data.
// Nothing more is read from the pickle's own stream. Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_PICKLE_JOBLIB_COMPANIONS_H_
#define CKPTSCAN_CORE_PICKLE_JOBLIB_COMPANIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/pickle/facts.h"

namespace ckptscan::pickle {

// joblib.numpy_pickle.NDArrayWrapper or ZNDArrayWrapper (by the resolved name, under the
// modules that define or re-export them, joblib's and the copy sklearn vendored).
bool IsJoblibCompanionWrapper(const GlobalRef& g);

struct JoblibCompanion {
  std::string filename;    // the state's 'filename', as the pickle has it (may be a prefix)
  bool truncated = false;  // `filename` is a prefix of a longer str
  bool unpickled = false;  // NDArrayWrapper: numpy.load(allow_pickle=True) reads it
  uint64_t offset = 0;     // the BUILD's offset
};

// Every BUILD of a str 'filename' in a dict state onto an object made by calling a companion
// wrapper (IsJoblibCompanionWrapper), in stream order, at most `max` of them.
std::vector<JoblibCompanion> JoblibCompanions(const Graph& g, size_t max);

// Whether os.path.join(dirname, name) stays in dirname and names a file there: not empty, no
// '/', not "." or "..", no NUL (open() refuses one).
bool IsPlainFileName(std::string_view name);

}  // namespace ckptscan::pickle

#endif  // CKPTSCAN_CORE_PICKLE_JOBLIB_COMPANIONS_H_
