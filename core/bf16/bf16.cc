#include "core/bf16/bf16.h"

#include <bit>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/bf16/bf16_internal.h"

#if CKPT_BF16_X86
#include <cpuid.h>
#endif

namespace ckptscan::bf16 {
namespace internal {

uint32_t Fp16BitsToFp32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {  // Inf, or NaN: keep the payload, set the quiet bit.
    return mant == 0 ? (sign | 0x7F800000u) : (sign | 0x7FC00000u | (mant << 13));
  }
  if (exp != 0) return sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  if (mant == 0) return sign;
  // Subnormal fp16 = mant * 2^-24: a normal fp32. Shift the leading one into
  // the implicit-bit position (bit 10) and lower the exponent to match.
  const int shift = std::countl_zero(mant) - (32 - 11);  // 1..10
  mant = (mant << shift) & 0x3FFu;
  const uint32_t fp32_exp = static_cast<uint32_t>(127 - 14 - shift);
  return sign | (fp32_exp << 23) | (mant << 13);
}

void Fp32ToBf16Scalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32BitsToBf16(std::bit_cast<uint32_t>(in[i]));
}

void Fp16ToBf16Scalar(const uint16_t* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32BitsToBf16(Fp16BitsToFp32Bits(in[i]));
}

}  // namespace internal

namespace {

using Fp32Kernel = void (*)(const float*, uint16_t*, size_t);
using Fp16Kernel = void (*)(const uint16_t*, uint16_t*, size_t);

struct Kernels {
  Fp32Kernel fp32;
  Fp16Kernel fp16;
};

constexpr Path kAllPaths[] = {Path::kScalar, Path::kAvx2, Path::kAvx512, Path::kAvx512Bf16};

#if CKPT_BF16_X86
// One CPUID feature bit. Used for the features clang 14's
// __builtin_cpu_supports does not know (f16c, avx512bf16); their register
// state is the AVX / AVX-512 state that the builtin checks have confirmed.
bool CpuidBit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};  // eax, ebx, ecx, edx
  if (__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return (r[reg] >> bit) & 1u;
}
bool CpuHasF16c() { return CpuidBit(1, 0, /*ecx*/ 2, 29); }
bool CpuHasAvx512Bf16() { return CpuidBit(7, 1, /*eax*/ 0, 5); }
#endif

// Compiled in and supported by this CPU. __builtin_cpu_supports also checks
// that the OS saves the AVX / AVX-512 register state (XCR0).
bool Available(Path path) {
  switch (path) {
    case Path::kScalar:
      return true;
#if CKPT_BF16_X86
    case Path::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && CpuHasF16c();
    case Path::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    case Path::kAvx512Bf16:
      return Available(Path::kAvx512) && CpuHasAvx512Bf16();
#else
    case Path::kAvx2:
    case Path::kAvx512:
    case Path::kAvx512Bf16:
      return false;
#endif
  }
  return false;  // Not a Path value.
}

// Only called for available paths.
Kernels KernelsFor(Path path) {
  switch (path) {
    case Path::kScalar:
      break;
#if CKPT_BF16_X86
    case Path::kAvx2:
      return {internal::Fp32ToBf16Avx2, internal::Fp16ToBf16Avx2};
    case Path::kAvx512:
      return {internal::Fp32ToBf16Avx512, internal::Fp16ToBf16Avx512};
    case Path::kAvx512Bf16:
      return {internal::Fp32ToBf16Avx512Bf16, internal::Fp16ToBf16Avx512Bf16};
#else
    default:
      break;
#endif
  }
  return {internal::Fp32ToBf16Scalar, internal::Fp16ToBf16Scalar};
}

// Chosen once, on first use; C++ guarantees thread-safe initialisation.
const Kernels& Dispatched() {
  static const Kernels kernels = KernelsFor(DispatchedPath());
  return kernels;
}

absl::Status Unavailable(Path path) {
  return absl::FailedPreconditionError(absl::StrCat("bf16 path ", std::string(PathName(path)),
                                                    " is not available on this binary/CPU"));
}

}  // namespace

uint16_t Fp32ToBf16Scalar(float f) { return internal::Fp32BitsToBf16(std::bit_cast<uint32_t>(f)); }

float Fp16ToFp32Scalar(uint16_t h) { return std::bit_cast<float>(internal::Fp16BitsToFp32Bits(h)); }

std::string_view PathName(Path path) {
  switch (path) {
    case Path::kScalar:
      return "scalar";
    case Path::kAvx2:
      return "avx2";
    case Path::kAvx512:
      return "avx512";
    case Path::kAvx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

std::vector<Path> AvailablePaths() {
  std::vector<Path> paths;
  for (Path p : kAllPaths) {
    if (Available(p)) paths.push_back(p);
  }
  return paths;
}

Path DispatchedPath() {
  static const Path path = AvailablePaths().back();
  return path;
}

void Fp32ToBf16(const float* in, uint16_t* out, size_t n) { Dispatched().fp32(in, out, n); }

void Fp16ToBf16(const uint16_t* in, uint16_t* out, size_t n) { Dispatched().fp16(in, out, n); }

absl::Status Fp32ToBf16OnPath(Path path, const float* in, uint16_t* out, size_t n) {
  if (!Available(path)) return Unavailable(path);
  KernelsFor(path).fp32(in, out, n);
  return absl::OkStatus();
}

absl::Status Fp16ToBf16OnPath(Path path, const uint16_t* in, uint16_t* out, size_t n) {
  if (!Available(path)) return Unavailable(path);
  KernelsFor(path).fp16(in, out, n);
  return absl::OkStatus();
}

}  // namespace ckptscan::bf16
