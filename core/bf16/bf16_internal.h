// Private to core/bf16: the per-target kernels behind bf16.h's dispatch.
#ifndef CKPTSCAN_CORE_BF16_BF16_INTERNAL_H_
#define CKPTSCAN_CORE_BF16_BF16_INTERNAL_H_

#include <cstddef>
#include <cstdint>

// x86-64 kernels are compiled in with GCC or clang; -DCKPT_BF16_X86=0 builds
// the portable-only library anywhere (used to test that configuration).
#ifndef CKPT_BF16_X86
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CKPT_BF16_X86 1
#else
#define CKPT_BF16_X86 0
#endif
#endif

namespace ckptscan::bf16::internal {

// The reference rounding on fp32 bits (see bf16.h). Baseline ISA only, so the
// SIMD kernels may call it for their tails.
inline uint16_t Fp32BitsToBf16(uint32_t u) {
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet it, never round it.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

uint32_t Fp16BitsToFp32Bits(uint16_t h);

void Fp32ToBf16Scalar(const float* in, uint16_t* out, size_t n);
void Fp16ToBf16Scalar(const uint16_t* in, uint16_t* out, size_t n);

#if CKPT_BF16_X86
// Callers must have checked the CPU (bf16.cc CpuSupports).
void Fp32ToBf16Avx2(const float* in, uint16_t* out, size_t n);
void Fp16ToBf16Avx2(const uint16_t* in, uint16_t* out, size_t n);
void Fp32ToBf16Avx512(const float* in, uint16_t* out, size_t n);
void Fp16ToBf16Avx512(const uint16_t* in, uint16_t* out, size_t n);
void Fp32ToBf16Avx512Bf16(const float* in, uint16_t* out, size_t n);
void Fp16ToBf16Avx512Bf16(const uint16_t* in, uint16_t* out, size_t n);
#endif

}  // namespace ckptscan::bf16::internal

#endif  // CKPTSCAN_CORE_BF16_BF16_INTERNAL_H_
