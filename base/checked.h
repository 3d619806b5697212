// Overflow-checked arithmetic for sizes and offsets that come from untrusted input.
// Each returns false (and leaves *out unspecified) when the exact result does not fit.
#ifndef CKPTSCAN_BASE_CHECKED_H_
#define CKPTSCAN_BASE_CHECKED_H_

#include <cstdint>

namespace ckptscan::base {

template <typename T>
[[nodiscard]] constexpr bool CheckedAdd(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}

template <typename T>
[[nodiscard]] constexpr bool CheckedMul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// True when [offset, offset + length) lies inside [0, size).
[[nodiscard]] constexpr bool RangeWithin(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_CHECKED_H_
