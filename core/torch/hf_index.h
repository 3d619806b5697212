// Sharded checkpoint indexes (`pytorch_model.bin.index.json`, as transformers writes them):
//
//   {"metadata": {"total_size": 132}, "weight_map": {"0.weight":
//   "pytorch_model-00001-of-00002.bin"}}
//
// ReadShardIndex reads one as transformers does, with Python's json.loads (base/json_python.h:
// the encoding told by a BOM or NUL bytes, NaN and Infinity, a repeated key's last value wins,
// nothing after the object but white space); `weight_map` is required and maps names to
// strings, `metadata.total_size` is a non-negative integer when present, other members are
// skipped, nesting bounded by max_depth. Every shard file name must be a plain name in the
// index's own directory (CheckShardFileName). Errors carry byte offsets. A JSON document
// without `weight_map` is format "json" with no error.
//
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_TORCH_HF_INDEX_H_
#define CKPTSCAN_CORE_TORCH_HF_INDEX_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {

struct IndexLimits {
  uint64_t max_bytes = 64ull << 20;  // the index file itself
  uint64_t max_entries = 1u << 20;   // weight_map entries
  uint64_t max_name_bytes = 4096;    // a tensor name
  uint32_t max_depth = 64;           // nesting of objects and arrays in the document
};

// True when `data`'s text, as json.loads(bytes) decodes it (a UTF-8 BOM, UTF-16 or UTF-32),
// begins after JSON white space with '{'. Its first byte is then '{', white space, a NUL or a
// BOM's first byte: none is a pickle opcode, so no pickle loader reads such a file. False for
// bytes that are also an ONNX model by their top level (onnx_check::LooksLikeModel).
bool LooksLikeJson(std::string_view data);

// Sets out->format ("hf-index" or "json") and out->shard_index, or adds an error.
void ReadShardIndex(std::string_view data, const IndexLimits& limits, FileFacts* out);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_HF_INDEX_H_
