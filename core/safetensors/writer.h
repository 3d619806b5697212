// Deterministic safetensors header writer. Given tensor specs and metadata it returns the file's
// first bytes (8-byte length + padded JSON header) and where each tensor's bytes go; the caller
// streams tensor data after the header in `placements` order. Same input → same bytes.
//
// Layout follows the reference writer (huggingface/safetensors `prepare`): tensors sorted by
// dtype descending in the reference enum order (U64, I64, F64, C64, F32, ... BOOL) — so each
// tensor is aligned to its element size — then by name (bytewise); offsets contiguous;
// compact JSON with `__metadata__` first (keys sorted) and fields dtype, shape, data_offsets;
// padded with trailing spaces so the data buffer starts at a multiple of 8. `__metadata__`
// always holds "format": "pt" (transformers refuses metadata without it).
//
// Everything the writer emits passes Validate() with default ValidatorLimits; inputs that would
// not (empty/non-UTF-8/control-character names, "__metadata__" as a name, duplicate names, a
// byte size that disagrees with shape × dtype, NUL in metadata, "format" other than "pt", more
// tensors/rank/metadata than the default limits, a header over 100,000,000 bytes) are errors.
// Thread-safe (no shared state).
//
//   CKPT_ASSIGN_OR_RETURN(safetensors::SerializedHeader h,
//                         safetensors::SerializeHeader(specs, {{"source_sha256", hex}}));
//   out.write(h.bytes);
//   for (const auto& p : h.placements) out.write(bytes_of(specs[p.spec_index]));
#ifndef CKPTSCAN_CORE_SAFETENSORS_WRITER_H_
#define CKPTSCAN_CORE_SAFETENSORS_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/safetensors/dtype.h"

namespace ckptscan::safetensors {

struct TensorSpec {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;  // empty for a 0-d tensor
  uint64_t byte_size;           // must equal numel(shape) × bits(dtype) / 8
};

struct Placement {
  size_t spec_index;     // index into the specs passed to SerializeHeader
  uint64_t data_begin;   // data_offsets[0], relative to the data buffer
  uint64_t data_end;     // data_offsets[1]
  uint64_t file_offset;  // absolute offset of the first byte: header size + data_begin
};

struct SerializedHeader {
  std::string bytes;                  // 8-byte little-endian N + N bytes of JSON and padding
  std::vector<Placement> placements;  // in file order
  uint64_t file_size;                 // bytes.size() + total tensor bytes
};

absl::StatusOr<SerializedHeader> SerializeHeader(
    std::span<const TensorSpec> tensors, const std::map<std::string, std::string>& metadata);

}  // namespace ckptscan::safetensors

#endif  // CKPTSCAN_CORE_SAFETENSORS_WRITER_H_
