// Sharded checkpoint indexes (`pytorch_model.bin.index.json`, as transformers writes them):
//
//   {"metadata": {"total_size": 132}, "weight_map": {"0.weight":
//   "pytorch_model-00001-of-00002.bin"}}
//
// ReadShardIndex reads one strictly with nlohmann-json's SAX parser: valid JSON only (no
// comments, nothing after the object but whitespace), duplicate keys at any level are errors,
// `weight_map` is required and maps names to strings, `metadata.total_size` is a non-negative
// integer when present, other members are skipped to a bounded depth. Every shard file name
// must be a plain name in the index's own directory (CheckShardFileName). Errors carry byte
// offsets. Valid JSON without `weight_map` is format "json" with no error: a JSON document.
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
  uint32_t max_depth = 64;           // nesting of skipped values (metadata extras)
};

// True when `data` begins, after JSON whitespace, with '{' — never the start of a pickle
// (0x7b and whitespace are no pickle opcodes), so no loader reads such a file differently.
bool LooksLikeJson(std::string_view data);

// Sets out->format ("hf-index" or "json") and out->shard_index, or adds an error.
void ReadShardIndex(std::string_view data, const IndexLimits& limits, FileFacts* out);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_HF_INDEX_H_
