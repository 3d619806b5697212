// bf16 conversion: fp32 -> bf16 and fp16 -> bf16 with round-to-nearest-even.
//
// Plain types only; the SIMD kernels live in per-target translation units
// (bf16_avx2.cc, bf16_avx512.cc) compiled with function target attributes, so
// this library runs on any x86-64 (and builds a portable path elsewhere).
// Semantics, dispatch and measurements: docs/bf16.md.
//
// Semantics (every path is bit-exact with Fp32ToBf16Scalar; the exhaustive
// tests in bf16_test.cc check all 2^32 fp32 and 2^16 fp16 inputs):
//   * finite values round to nearest, ties to even; values past the largest
//     finite bf16 round to +-Inf; fp32 subnormals round to bf16 subnormals
//     (no flush to zero); +-0 and +-Inf are kept;
//   * NaN -> (bits >> 16) | 0x0040: a quiet NaN with the same sign and the top
//     payload bits. A NaN never becomes Inf.
//
// Threading: every function is thread-safe. The dispatched functions pick the
// best path on first use (a function-local static) and never change it.
//
// Example:
//   std::vector<uint16_t> out(n);
//   ckptscan::bf16::Fp32ToBf16(weights.data(), out.data(), n);
#ifndef CKPTSCAN_CORE_BF16_BF16_H_
#define CKPTSCAN_CORE_BF16_BF16_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ckptscan::bf16 {

// One fp32 value (passed by value; its bits are read unchanged) to bf16 bits.
// This is the reference every other path is tested against.
uint16_t Fp32ToBf16Scalar(float f);

// fp16 (IEEE binary16) bits to fp32, exactly: subnormals become normal fp32,
// +-Inf and +-0 are kept, a NaN keeps its sign and payload and is quieted
// (bit 22 set), as F16C's vcvtph2ps does.
float Fp16ToFp32Scalar(uint16_t h);

// The array paths. Declared in increasing order of preference.
enum class Path {
  kScalar,      // Portable C++, one element at a time; every platform.
  kAvx2,        // x86-64 AVX2 + F16C, integer RNE, 16 elements per step.
  kAvx512,      // x86-64 AVX-512 F/BW/VL, integer RNE, 16 lanes, masked tail.
  kAvx512Bf16,  // kAvx512 + AVX512-BF16 vcvtneps2bf16, subnormal lanes fixed up.
};

std::string_view PathName(Path path);

// Paths compiled into this binary AND supported by the running CPU, in
// increasing order of preference; always starts with kScalar.
std::vector<Path> AvailablePaths();

// The path the dispatched functions use (the last of AvailablePaths()).
Path DispatchedPath();

// Converts n elements (n may be 0). in and out need only their element
// type's alignment (no vector alignment) and must not overlap. Uses
// DispatchedPath().
void Fp32ToBf16(const float* in, uint16_t* out, size_t n);
void Fp16ToBf16(const uint16_t* in, uint16_t* out, size_t n);

// The same on an explicit path, for tests and benchmarks. Returns
// FailedPrecondition (and writes nothing) if `path` is not in AvailablePaths().
[[nodiscard]] absl::Status Fp32ToBf16OnPath(Path path, const float* in, uint16_t* out, size_t n);
[[nodiscard]] absl::Status Fp16ToBf16OnPath(Path path, const uint16_t* in, uint16_t* out, size_t n);

}  // namespace ckptscan::bf16

#endif  // CKPTSCAN_CORE_BF16_BF16_H_
