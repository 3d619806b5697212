// Strict GGUF reader (llama.cpp and the ggml tools; ggml-org/ggml docs/gguf.md): the header,
// the key/value metadata, the tensor infos and where each tensor's bytes are, checked as ggml's
// own loader (gguf_init_from_file_impl) checks them and stricter where readers disagree.
//
// Layout (all little-endian): "GGUF", u32 version (2 or 3; 1 used 32-bit counts and is refused
// by every current reader), u64 tensor count, u64 key/value count; then each key/value (a
// string key, a u32 value type, the value; an array is a u32 element type, a u64 count and the
// elements); then each tensor info (a string name, a u32 dimension count, that many u64
// dimensions with the fastest-varying first, a u32 ggml type, a u64 offset from the data
// section's start); then padding to general.alignment (default 32); then the data section, in
// which every tensor lies at the running sum of the padded sizes of the tensors before it.
//
// What is refused (an error naming the byte offset): a truncated or oversized length, a count
// or size past the bytes that remain or past a named limit, a value type outside the 13 GGUF
// types, nested arrays deeper than the limit, a key or tensor name that is empty, holds a NUL
// or is not UTF-8, a bool other than 0 or 1, general.alignment of a type other than u32 or not a
// power of two, a tensor name of 64 bytes or more (GGML_MAX_NAME), more than 4 dimensions, a
// negative dimension or element count past INT64_MAX, a ggml type that is not in the table or
// was removed, a row not a whole number of blocks, a tensor whose offset is not where ggml
// expects it (misaligned, overlapping, out of order, with a gap), a data section (every tensor
// padded to the alignment, as ggml reads it) that runs past the end of the file, a chat template
// (tokenizer.chat_template, tokenizer.chat_template.NAME) that is not a UTF-8 string. What is
// reported as an anomaly (the reading goes on): a key or tensor name seen twice (ggml refuses the
// file, other readers keep one of them), bytes after the data section.
//
// A parser of untrusted bytes: worker side only. Iterative (no recursion on input depth), every
// length checked before use with overflow-checked arithmetic. Thread-safe: pure function.
#ifndef CKPTSCAN_CORE_GGUF_GGUF_H_
#define CKPTSCAN_CORE_GGUF_GGUF_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckptscan::gguf {

// Named limits; past any of them Read fails with ResourceExhausted naming the field.
struct Limits {
  uint64_t max_kv = 1'000'000;               // key/value pairs
  uint64_t max_tensors = 1'000'000;          // tensor infos
  uint64_t max_key_bytes = 65'535;           // one key (docs/gguf.md: keys are at most 65535)
  uint64_t max_string_bytes = 64ull << 20;   // one string value
  uint64_t max_array_elements = 1ull << 26;  // elements of all arrays together
  uint32_t max_array_depth = 4;              // arrays of arrays (ggml itself reads depth 1)
  uint64_t max_alignment = 1ull << 20;       // general.alignment
};

// The ggml tensor types: id, name, elements per block, bytes per block (gguf-py's
// GGML_QUANT_SIZES; ggml.c type_traits). Ids without an entry were removed from ggml and are
// refused.
struct GgmlType {
  uint32_t id;
  std::string_view name;
  uint32_t block_elements;
  uint32_t block_bytes;
};
const GgmlType* FindGgmlType(uint32_t id);

// GGUF's value types (the u32 before each value).
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

struct Tensor {
  std::string name;
  uint32_t type = 0;           // ggml type id (FindGgmlType is non-null for it)
  std::vector<uint64_t> dims;  // as stored: ne[0] (fastest-varying) first
  uint64_t offset = 0;         // absolute file offset of the first byte
  uint64_t nbytes = 0;         // bytes of its data (padding excluded)
  uint64_t info_offset = 0;    // absolute offset of its tensor info (for messages)
};

// A chat template from the metadata (core/content/template_check.h reads it).
struct Template {
  std::string key;        // "tokenizer.chat_template" or "tokenizer.chat_template.NAME"
  std::string_view text;  // the value's bytes (valid UTF-8), a view into the file
  uint64_t offset = 0;    // absolute offset of the value's first byte
};

struct Anomaly {
  std::string kind;  // "duplicate_key", "duplicate_tensor", "trailing_data"
  uint64_t offset = 0;
  std::string message;
};

struct File {
  uint32_t version = 0;
  uint64_t kv_count = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;      // absolute offset of the data section
  uint64_t data_end = 0;        // one past the last tensor's padded bytes (inside the file)
  std::string architecture;     // general.architecture when it is a plain short string, else ""
  std::vector<Tensor> tensors;  // in file order
  std::vector<Template> templates;
  std::vector<Anomaly> anomalies;
};

inline constexpr std::string_view kMagic = {"GGUF", 4};

// Reads a whole GGUF file held in memory (or mapped). The returned File views `data` (its
// templates): `data` must outlive it. On failure, *error_offset (when given) is the absolute
// offset of the item that failed (the key/value, tensor info or section).
absl::StatusOr<File> Read(std::string_view data, const Limits& limits,
                          uint64_t* error_offset = nullptr);

}  // namespace ckptscan::gguf

#endif  // CKPTSCAN_CORE_GGUF_GGUF_H_
