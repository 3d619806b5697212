// ReadFile: one file's bytes → FileFacts, reading each format the way its real loader would.
// The readings live one file each beside this one (reader.h says which).
//
// The format comes from the content at offset 0, never from the file name, in torch.load's own
// order (torch/serialization.py load): "PK\3\4" → zip (a torch archive, a TorchScript archive, an
// .npz, or another zip); "\x93NUMPY" → .npy; joblib < 0.10's "ZF", 7z, rar and zstd →
// unsupported, fail closed; a joblib compression prefix (zlib "x", gzip, bz2 "BZ", lzma, xz,
// lz4; compress::DetectJoblibCodec) → joblib.load's reading of the decompressed bytes
// (format "zlib", "gzip", "bzip2", "lzma", "xz" or "lz4"), and the other loaders' reading of
// the same bytes as below; a valid tar header → torch <= 0.3's tar checkpoint (tar.h), or,
// without torch's members, unsupported; '{' after optional whitespace → a JSON
// sharded-checkpoint index (hf_index.h; no pickle starts so); otherwise a pickle stream, which
// is torch's legacy format when its first pickle is the legacy magic literal. A tar, and a
// compressed file, are also read as a pickle from offset 0 (torch.load's and pickle.load's
// reading).
//
// Every reading of a polyglot is scanned: a zip archive that also parses as a pickle at offset
// 0 (what pickle.load would read), and a pickle stream with a zip archive after it (what
// zipfile-based tools would read) both report the other reading's findings, and the file gets
// a "polyglot" anomaly. Zips inside zips are read to `max_container_depth`.
//
// Thread-safe: pure function of its arguments.
#ifndef CKPTSCAN_CORE_FORMATS_READ_FILE_H_
#define CKPTSCAN_CORE_FORMATS_READ_FILE_H_

#include <cstdint>
#include <string_view>

#include "core/compress/decompress.h"
#include "core/content/content.h"
#include "core/content/template_check.h"
#include "core/gguf/gguf.h"
#include "core/onnx/onnx_check.h"
#include "core/pickle/vm.h"
#include "core/safetensors/validator.h"
#include "core/torch/file_facts.h"
#include "core/torch/hf_index.h"
#include "core/torch/numpy.h"
#include "core/torch/repo_json.h"
#include "core/torch/repo_yaml.h"
#include "core/torch/tar.h"
#include "core/zip/zip_reader.h"

namespace ckptscan::formats {

struct ReadOptions {
  zip::Limits zip;
  torch::TarLimits tar;
  torch::IndexLimits index;
  compress::Limits compress;  // joblib's compressed files (core/compress/decompress.h)
  uint32_t max_container_depth = 2;   // archives inside archives (0: no nested archive is read)
  content::Limits content;            // text, images, SentencePiece models
  content::TemplateLimits templates;  // chat templates
  gguf::Limits gguf;                  // GGUF files (core/gguf/gguf.h)
  onnx_check::Limits onnx;            // ONNX models (core/onnx/onnx_check.h)
  torch::YamlLimits yaml;             // YAML files (core/torch/repo_yaml.h)
  safetensors::ValidatorLimits safetensors;
  // TorchScript code files read (at most torch::kMaxCodeFiles, the result frame's bound).
  uint64_t max_code_files = torch::kMaxCodeFiles;
  // Objects of a Keras config judged (at most torch::kMaxJsonObjectRefs, those collected).
  uint64_t max_keras_objects = torch::kMaxJsonObjectRefs;
  uint64_t max_npy_header_bytes = torch::kMaxNpyHeaderBytes;  // one .npy header
  // Every limit above settable by name: read_options_limits.h (--limit, the job).
  // The file's name as the caller knows it (its last component), or "". Only what a loader
  // reads by name uses it: a text file named *.jinja is a chat template (transformers reads
  // chat_template.jinja), one named *.yaml or *.yml a YAML file (PyYAML, Hydra), a JSON
  // document named adapter_config.json PEFT's adapter config; an empty file under a weights
  // name (IsWeightsName in reader.h) is ERROR not_present. The format never comes from it.
  std::string file_name;
  // Set by the reader itself for the config.json at the root of a zip of files: what
  // keras.saving.load_model reads from a .keras archive, whose objects are judged
  // (core/torch/keras_config.h).
  bool keras_config = false;
  const pickle::TraceSink* trace = nullptr;
};

torch::FileFacts ReadFile(std::string_view data, const pickle::Vm& vm,
                          const ReadOptions& options = {});

}  // namespace ckptscan::formats

#endif  // CKPTSCAN_CORE_FORMATS_READ_FILE_H_
