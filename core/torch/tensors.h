// Tensor facts from a torch pickle's value graph: what torch.load would build, described
// without building it.
//
// torch.save pickles every tensor as a call of a rebuild function (torch._utils
// _rebuild_tensor_v2 and friends, torch/_tensor.py _reduce_ex_internal) whose first argument is a
// storage named by a persistent id ('storage', StorageClass, key, location, numel[,
// view_metadata]). This module walks the graph from the pickle's root through dicts, OrderedDicts,
// lists and tuples, names each tensor by its path (keys and indices joined with '.', as the tests'
// torch-side flattener does), and records dtype, shape, strides, storage key and offset. Storages
// are listed once each, in first-seen order. It never trusts a number: every shape, stride and
// offset is range-checked, and anything it cannot describe is reported with a reason.
//
// Thread-compatible; pure functions over an immutable graph.
#ifndef CKPTSCAN_CORE_TORCH_TENSORS_H_
#define CKPTSCAN_CORE_TORCH_TENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/pickle/facts.h"

namespace ckptscan::torch {

struct DTypeInfo {
  std::string_view name;         // torch's name without "torch.": "float32"
  uint32_t size;                 // bytes per element
  std::string_view safetensors;  // "F32"; empty when safetensors has no name for it
  // Elements packed into one storage element (byte): 2 for quint4x2, 4 for quint2x4, whose
  // storages hold ceil(numel / per_byte) bytes while sizes and strides count elements.
  uint32_t per_byte = 1;
};

// By storage class qualname ("FloatStorage"), or nullptr.
const DTypeInfo* DTypeFromStorageClass(std::string_view qualname);
// By torch dtype attribute name ("float32", "half"), or nullptr.
const DTypeInfo* DTypeFromName(std::string_view name);
// By safetensors dtype name ("F32"), or nullptr for one torch has no dtype of ours for ("F4").
const DTypeInfo* DTypeFromSafetensors(std::string_view name);

struct StorageRef {
  std::string key;
  const DTypeInfo* dtype = nullptr;  // nullptr for UntypedStorage (bytes)
  bool untyped = false;
  std::string location;
  uint64_t numel = 0;       // elements of `dtype` (bytes when untyped)
  uint64_t pid_offset = 0;  // byte offset of the persistent_load in the stream
};

struct TensorFact {
  std::string name;
  enum class Kind : uint8_t { kDense, kQuantized, kSparse, kMeta, kOther };
  Kind kind = Kind::kDense;
  const DTypeInfo* dtype = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  uint64_t storage_offset = 0;  // elements, relative to the storage start (views resolved)
  int32_t storage = -1;         // index into TensorExtraction::storages, -1 without storage
  bool requires_grad = false;
  bool parameter = false;
  uint64_t offset = 0;  // byte offset of the rebuild call in the stream
  pickle::NodeId node = pickle::kNoNode;
  // Non-empty when the tensor cannot be described or converted as a plain dense tensor.
  std::string problem;
  // kQuantized (torch._utils._rebuild_qtensor's quantizer_params, torch/_tensor.py): the
  // qscheme global's name ("per_tensor_affine", "per_channel_affine"), with either the
  // per-tensor scale and zero point or the per-channel axis and `qchannel` = {scales,
  // zero_points}, each a dense tensor with its own storage (torch.save writes them as nested
  // _rebuild_tensor_v2 calls). Their names are this tensor's plus ".scale" / ".zero_point".
  std::string qscheme;
  double q_scale = 0;
  int64_t q_zero_point = 0;
  int64_t q_axis = 0;
  std::vector<TensorFact> qchannel;

  uint64_t numel() const;  // 0 for empty shapes; saturates at UINT64_MAX
};

// A value the walk reached that is neither a tensor nor a container it descends into (an
// epoch number, a hyperparameter, RNG state, an empty dict): what a conversion leaves out.
struct OtherValue {
  std::string name;     // dotted path, as tensors are named ("" for the root itself)
  std::string type;     // "int", "str", "dict (empty)", "argparse.Namespace", ...
  uint64_t offset = 0;  // byte offset in the stream where the value was made (0 if unknown)
};

// At most this many OtherValues are listed per file; OtherValues::total counts them all.
inline constexpr size_t kMaxListedOtherValues = 1000;
// Most dimensions a tensor's facts carry (the trusted side's decoder refuses more; numpy's
// NPY_MAXDIMS is the same 64). A pickle asking for more gives a malformed tensor.
inline constexpr size_t kMaxTensorDims = 64;

struct OtherValues {
  std::vector<OtherValue> listed;  // in walk order, at most kMaxListedOtherValues
  uint64_t total = 0;
};

struct TensorExtraction {
  std::vector<TensorFact> tensors;
  OtherValues other_values;
  std::vector<StorageRef> storages;
  // Rebuild calls or storage references that could not be described (with offsets).
  std::vector<std::string> problems;
};

// torch <= 0.3 tar checkpoints: the object pickle's persistent ids are plain keys. torch looks
// up int(pid) among the tensors and storages that its other members describe (a tuple pid is
// a module class with its source, not data).
struct KeyedObjects {
  struct Entry {
    bool tensor = false;  // true: index into `tensors`; false: into `storages`
    size_t index = 0;
  };
  std::map<int64_t, Entry> by_key;
  std::vector<TensorFact> tensors;  // unnamed; `storage` indexes `storages`
  std::vector<StorageRef> storages;
};

// The two forms of torch's storage persistent ids (torch/serialization.py persistent_load).
enum class PersistentIds : uint8_t {
  // torch.load of a zip archive: ('storage', type, key, location, numel), exactly; storages
  // cached by key.
  kZip,
  // torch's legacy format: a sixth item, None or a storage view (view_key, offset, size);
  // storages and views cached by key in one dict, so a view key used again gets the view made
  // first, whatever offset and size follow it.
  kLegacy,
};

// A walk over a value graph whose containers are shared by many paths takes more steps than it
// has nodes: at most this many more (a problem stops it).
inline constexpr uint64_t kMaxRewalkSteps = 1ull << 22;
// Bytes of all tensor (and listed other value) names of one pickle together.
inline constexpr uint64_t kMaxTensorNameBytes = 256ull << 20;

// Walks `p` from its root the way the caller of torch.load walks the result: through dicts
// (and OrderedDict, defaultdict and Counter), lists and tuples, naming each value by its key
// path, str(key) joined with '.'. Dict keys are taken as Python's dict takes them: keys that
// compare equal (True, 1 and 1.0; 'w' and TorchVersion('w')) are one key, named by the first
// key object and holding the last value. A container reached by several paths is walked under
// each, so a tensor there, like a tensor object reached by several paths (tied weights), is
// listed under each name. What the walk cannot name as Python would (a key type it does not
// model, a container holding itself, a container changed after a call copied it) leaves the
// tensors under it with a problem, as does anything that makes torch.load's tensor differ
// from the file's bytes (a state set with setattr on a tensor attribute, a SETITEM on a
// tensor, a 'meta' storage location).
// With `keyed`, persistent ids are resolved as plain keys into it (every one must resolve,
// as torch's persistent_load would), the result's storages are `keyed->storages`, and a
// persistent id that names a tensor is that tensor.
TensorExtraction ExtractTensors(const pickle::PickleFacts& p, const KeyedObjects* keyed = nullptr,
                                PersistentIds ids = PersistentIds::kZip);

// Python's repr() (and str()) of a float: the shortest digits that read back to it, in fixed
// notation when its decimal exponent is in [-4, 16), else with an exponent of at least two
// digits ("1e+16", "1e-05"), ".0" on integral values; "inf", "-inf", "nan".
std::string PythonFloatRepr(double v);

// The safetensors dtype of a quantized dtype's integer data ("I8" for qint8, "U8" for quint8,
// "I32" for qint32), or empty (the packed quint4x2 and quint2x4, anything else).
std::string_view QuantizedDataDtype(const DTypeInfo* dtype);

// Checks that a kQuantized tensor can be written as its integer data plus its quantization
// parameters: a dtype QuantizedDataDtype names; per_tensor_affine without per-channel tensors;
// per_channel_affine (or _float_qparams) with an axis inside the shape and scales (float64 or
// float32) and zero_points (int64 or float32) of shape [size(axis)]. OK, or FailedPrecondition
// saying what is not so.
absl::Status CheckQuantized(const TensorFact& t);

// How many elements of `dtype` `bytes` bytes hold: bytes / size, times per_byte for a packed
// dtype. Saturates at UINT64_MAX; `bytes` itself for a null dtype.
uint64_t ElementsIn(uint64_t bytes, const DTypeInfo* dtype);

// How many elements of `t`'s dtype its storage `s` holds: s's bytes (numel elements of s's
// dtype, or numel bytes when untyped) in t's element size. _rebuild_tensor_v3 names its own
// dtype and torch 2.x sets the tensor on the storage's bytes, so the two dtypes may differ (a
// float64 tensor over a ByteStorage of 8 bytes has one element, not eight).
uint64_t StorageElements(const TensorFact& t, const StorageRef& s);

// CheckBounds of `t` against its storage in `storages` (StorageElements), and of a quantized
// tensor's per-channel scales and zero points against theirs; OK for a tensor without a storage.
// Every reader checks what it extracted with this.
absl::Status CheckStorageBounds(const TensorFact& t, const std::vector<StorageRef>& storages);

// Checks that the tensor's elements lie inside a storage of `storage_numel` elements of the
// tensor's own dtype (StorageElements):
// offset + sum((size_i - 1) * stride_i) < storage_numel, overflow-checked; negative strides
// and sizes are errors; empty tensors only need offset <= storage_numel.
absl::Status CheckBounds(const TensorFact& t, uint64_t storage_numel);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_TENSORS_H_
