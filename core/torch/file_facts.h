// FileFacts: everything the worker side learns from one file's bytes — the container layout,
// the pickle streams it found (each scanned by the VM), container anomalies, and the tensors
// with where their bytes are. Facts only: no verdict (the trusted side applies the rules).
#ifndef CKPTSCAN_CORE_TORCH_FILE_FACTS_H_
#define CKPTSCAN_CORE_TORCH_FILE_FACTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "ckptscan/v1/report.pb.h"
#include "core/pickle/facts.h"
#include "core/torch/tensors.h"

namespace ckptscan::torch {

// The facts of one pickle stream: a raw pickle file, or one member of a container.
struct MemberFacts {
  std::string member;  // "" for a raw pickle file
  pickle::StreamFacts stream;
  // A reading by a loader other than the one the format names (pickle.load of a joblib file,
  // of a zip, tar or safetensors file, of a zip member torch never reads). Its findings count
  // like any other. An error that the real unpickler raises at the same point ends it cleanly
  // (that loader fails there, having imported and called only what the findings list); a stop
  // on a limit or on a rule stricter than the loader is an error of the file, since the loader
  // would read on into bytes nobody judged.
  bool alternative = false;
};

// Something about the container that the real loader reads differently from a naive reader,
// or that has no business being there (container.* findings on the trusted side).
struct ContainerAnomaly {
  std::string kind;  // stable id, e.g. "duplicate_member" (rule id: <category>.<kind>)
  std::string member;
  uint64_t offset = 0;  // byte offset in the file (in `member`'s bytes when it is a member's)
  std::string message;
  bool must_flag = true;  // false: informational, the verdict is not raised for it
  // "container" (the file's structure), "template" (a chat template's construct,
  // core/content/template_check.h), "repo" (what a repository makes loaders run: a config's
  // auto_map naming code), "keras" (what a Keras archive's config builds,
  // core/torch/keras_config.h) or "onnx" (what an ONNX model makes a runtime read or load,
  // core/onnx/onnx_check.h).
  std::string category = "container";
};

// Where a storage's bytes are in the file.
struct StorageData {
  std::string key;
  std::string member;   // zip member, or "" (legacy: the file itself)
  uint64_t offset = 0;  // absolute byte offset of the first byte
  uint64_t nbytes = 0;
  bool stored = true;  // false: compressed in the container (not mappable)
};

// A sharded checkpoint's index (format "hf-index", core/torch/hf_index.h).
struct ShardIndex {
  bool present = false;
  bool has_total_size = false;
  uint64_t total_size = 0;  // metadata.total_size
  // weight_map: tensor name -> shard file name, in the file's order (keys are unique).
  std::vector<std::pair<std::string, std::string>> weight_map;
};

// A safetensors file that passed the strict validator (core/safetensors/validator.h) in the
// worker. A file that failed it has format "safetensors", valid false and an error.
struct SafetensorsFacts {
  bool valid = false;
  uint64_t tensors = 0;
  uint64_t data_bytes = 0;     // the data buffer: file size - 8 - header_length
  uint64_t header_length = 0;  // N, as stored
  bool has_metadata = false;
};

// A GGUF file that the strict reader (core/gguf/gguf.h) read whole in the worker. A file that
// failed it has format "gguf", valid false and an error.
struct GgufFacts {
  bool valid = false;
  uint32_t version = 0;
  uint64_t tensors = 0;
  uint64_t kv_count = 0;
  uint64_t alignment = 0;
  uint64_t data_bytes = 0;
};

// An ONNX model that decoded and walked whole in the worker (core/onnx/onnx_check.h).
struct OnnxFacts {
  bool valid = false;
  int64_t ir_version = 0;
  uint64_t nodes = 0;
  uint64_t graphs = 0;
  uint64_t tensors = 0;
};

// A TorchScript archive's code file (code/**/*.py): the source torch.jit.load compiles and
// runs. Its bytes (inflated as torch's reader inflates them) cross the jail so that the trusted
// side can hash them for the report, up to kMaxCodeBytes per archive.
struct CodeFile {
  std::string name;     // member name
  uint64_t offset = 0;  // absolute offset of its data in the file
  uint64_t nbytes = 0;  // uncompressed size
  bool has_content = false;  // false: unreadable, or past kMaxCodeBytes (listed, not hashed)
  std::string content;
};

// At most this many code files are listed per archive, and this many of their bytes carried.
inline constexpr size_t kMaxCodeFiles = 10000;
inline constexpr uint64_t kMaxCodeBytes = 8ull << 20;

// A shard file name must name a file in the index's own directory: not empty, at most 255
// bytes, no '/' or NUL, not "." or "..".
absl::Status CheckShardFileName(std::string_view name);

inline constexpr size_t kMaxQuantMethodBytes = 64;

// A quant_method worth keeping (it is shown in reports and messages): 1 to kMaxQuantMethodBytes
// characters of [A-Za-z0-9_.-].
inline bool IsPlainQuantMethod(std::string_view s) {
  if (s.empty() || s.size() > kMaxQuantMethodBytes) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// numpy's NpzFile[key] reads the member named exactly `key` when the archive has one, and only
// otherwise key + ".npy" (numpy/lib/npyio.py, NpzFile.__getitem__; numpy 1.24 and 2.2). The
// member read for `key` among `members` (zip member names), or "" when there is none.
std::string_view NpzMemberFor(std::string_view key,
                              const absl::flat_hash_set<std::string_view>& members);

// Data: a file validated whole as one of the data classes, in which no loader finds code (a
// text, a JSON document, an image, a SentencePiece model, an empty file). Its report has kind
// "data".
bool IsDataFormat(std::string_view format);

// At most this many auto_map entries are kept per file (the rest are counted in the message).
inline constexpr size_t kMaxAutoMapEntries = 32;

struct FileFacts {
  // Detected from the content, never from the name: "pickle", "torch-zip", "torch-legacy",
  // "torch-tar", "torchscript", "npy", "npz", "zip", "tar", "joblib", joblib's compressed
  // "zlib", "gzip", "bzip2", "lzma", "xz", "lz4", "joblib-compat", "zstd", "7z", "rar",
  // "safetensors", "hf-index", "gguf", "onnx", "hdf5", "keras" (a zip of files with a
  // root config.json and Keras's metadata or weights); the data classes (IsDataFormat) "json", "text", "png", "jpeg",
  // "gif", "webp", "sentencepiece" and "empty"; or "unknown" (no reading applies: a pickle
  // reading rejected at offset 0, and nothing else).
  std::string format;
  // Why (part of) the file could not be scanned or verified.
  std::vector<v1::ScanError> errors;
  std::vector<MemberFacts> members;
  std::vector<ContainerAnomaly> anomalies;
  // Tensors of the checkpoint (torch formats and numpy), storages, and their bytes.
  std::vector<TensorFact> tensors;
  std::vector<StorageRef> storages;
  std::vector<StorageData> storage_data;  // parallel to `storages`
  // Values beside the tensors (torch formats), which a conversion does not write.
  OtherValues other_values;
  ShardIndex shard_index;  // format "hf-index" only
  // A JSON file's top-level quantization_config.quant_method (transformers' config.json:
  // "gptq", "awq", "bitsandbytes", "hqq", "fp8", ...), at most kMaxQuantMethodBytes of
  // [A-Za-z0-9_.-]; "" when absent or anything else. convert reads the config.json beside its
  // input for it (docs/safetensors.md, "Quantized weights").
  std::string quant_method;
  SafetensorsFacts safetensors;  // format "safetensors" only
  GgufFacts gguf;                // format "gguf" only
  OnnxFacts onnx;                // format "onnx" only
  std::vector<CodeFile> code_files;  // format "torchscript" only, at most kMaxCodeFiles
  // Members of a zip of files ("zip", "keras") read as files of their own (their findings and
  // errors are this file's; their tensors are not).
  uint64_t files_read = 0;
};

// A report error found while reading a container (malformed, unsupported). A limit is a
// StatusError of a base::LimitError, so that it names the limit.
v1::ScanError ContainerError(v1::ErrorCode code, std::string message, std::string_view member,
                             uint64_t offset);
// A report error code for a failed status: LIMIT (ResourceExhausted), UNSUPPORTED
// (Unimplemented) or MALFORMED (anything else).
v1::ErrorCode ErrorCodeOf(const absl::Status& status);
// The same for a failed status: its code from ErrorCodeOf, and the limit's name and value
// when the status names one (base::LimitError).
v1::ScanError StatusError(const absl::Status& status, std::string message, std::string_view member,
                          uint64_t offset);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_FILE_FACTS_H_
