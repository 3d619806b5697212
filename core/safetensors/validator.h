// Strict safetensors validator: accepts a subset of what the reference loader
// (huggingface/safetensors SafeTensors::read_metadata + Metadata::validate) accepts. Every check
// the reference makes is made here; on top of it, the strict profile rejects what loaders
// disagree on (duplicate JSON keys at any level, unknown tensor fields, NUL/control characters
// in names, ...). docs/safetensors.md tables every rule beside the reference's behaviour.
//
// Only the 8-byte length and the header are read; tensor bytes are never examined. The header is
// parsed with nlohmann-json's SAX interface (iterative, no DOM) so duplicate keys are seen.
// Errors are InvalidArgument (malformed) or ResourceExhausted (over a ValidatorLimits field),
// and name the tensor (escaped) and the absolute byte offset.
//
// Thread-safe (no shared state). The returned Layout owns its strings.
//
//   CKPT_ASSIGN_OR_RETURN(safetensors::Layout layout,
//                         safetensors::Validate(file_bytes, safetensors::ValidatorLimits{}));
//   for (const auto& t : layout.tensors) hash(file_bytes.substr(t.begin, t.end - t.begin));
#ifndef CKPTSCAN_CORE_SAFETENSORS_VALIDATOR_H_
#define CKPTSCAN_CORE_SAFETENSORS_VALIDATOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/safetensors/dtype.h"

namespace ckptscan::safetensors {

// Named limits; past any of them Validate fails with ResourceExhausted naming the field.
struct ValidatorLimits {
  // Header length N. The reference's MAX_HEADER_SIZE (100,000,000, decimal).
  uint64_t max_header_bytes = 100'000'000;
  // Tensor entries in the header (strict profile; bounds CPU spent on "header bloat").
  uint64_t max_tensors = 1'000'000;
  // Dimensions of one tensor (strict profile).
  uint64_t max_rank = 16;
  // Entries in __metadata__.
  uint64_t max_metadata_entries = 100'000;
};

struct TensorLayout {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;  // empty for a 0-d tensor (one element)
  uint64_t begin;               // absolute file offset of the first byte
  uint64_t end;                 // absolute file offset one past the last byte
};

struct Layout {
  uint64_t header_length;  // N, as stored (padding included)
  uint64_t data_start;     // 8 + N: absolute offset of the data buffer
  uint64_t file_size;
  // In data order (by data_offsets, then name); not the header's key order.
  std::vector<TensorLayout> tensors;
  bool has_metadata = false;  // __metadata__ present and not null
  std::map<std::string, std::string> metadata;
};

// Validates a whole file held in memory (or mmapped).
absl::StatusOr<Layout> Validate(std::string_view file, const ValidatorLimits& limits);

// Same checks, given only a prefix of the file that holds at least the 8-byte length and the
// header, and the size of the whole file. For streaming readers.
absl::StatusOr<Layout> ValidateHeader(std::string_view prefix, uint64_t file_size,
                                      const ValidatorLimits& limits);

}  // namespace ckptscan::safetensors

#endif  // CKPTSCAN_CORE_SAFETENSORS_VALIDATOR_H_
