// safetensors element types, in the reference implementation's enum order (huggingface/
// safetensors, `Dtype` in src/tensor.rs). The order is part of the format: the reference writer
// (and ours) sorts tensors by descending enum value, which keeps every tensor aligned to its
// element size. Names are case-sensitive. Header-only data; thread-safe.
#ifndef CKPTSCAN_CORE_SAFETENSORS_DTYPE_H_
#define CKPTSCAN_CORE_SAFETENSORS_DTYPE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace ckptscan::safetensors {

enum class Dtype : uint8_t {
  kBool,
  kF4,
  kF6E2M3,
  kF6E3M2,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

// Every dtype, ascending enum order.
std::span<const Dtype> AllDtypes();
// The header spelling, e.g. "BF16", "F8_E4M3".
std::string_view DtypeName(Dtype d);
// Bits per element (4 for F4, 6 for F6_*; a tensor of those must fill whole bytes).
uint32_t DtypeBits(Dtype d);
// Exact, case-sensitive lookup of a header spelling.
std::optional<Dtype> ParseDtype(std::string_view name);

}  // namespace ckptscan::safetensors

#endif  // CKPTSCAN_CORE_SAFETENSORS_DTYPE_H_
