// AVX2 + F16C kernels. Compiled for baseline x86-64: only these functions carry
// the target attribute, and bf16.cc calls them only after checking the CPU.
#include "core/bf16/bf16_internal.h"

#if CKPT_BF16_X86
#include <immintrin.h>

#define CKPT_BF16_AVX2 __attribute__((target("avx2,f16c")))

namespace ckptscan::bf16::internal {
namespace {

// Eight fp32 bit patterns -> eight bf16 in the low 16 bits of each lane.
CKPT_BF16_AVX2 inline __m256i Rne8(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  // |u| > Inf as signed ints: both sides are non-negative.
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                            _mm256_set1_epi32(0x7F800000));
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

// Sixteen results (each < 2^16, so packus does not saturate) in order.
CKPT_BF16_AVX2 inline void Store16(uint16_t* out, __m256i lo, __m256i hi) {
  // packus interleaves 128-bit lanes: lo0 hi0 lo1 hi1; 0xD8 restores lo0 lo1 hi0 hi1.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), packed);
}

CKPT_BF16_AVX2 inline __m256i Widen8(const uint16_t* in) {
  return _mm256_castps_si256(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
}

}  // namespace

CKPT_BF16_AVX2 void Fp32ToBf16Avx2(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8));
    Store16(out + i, Rne8(lo), Rne8(hi));
  }
  Fp32ToBf16Scalar(in + i, out + i, n - i);
}

CKPT_BF16_AVX2 void Fp16ToBf16Avx2(const uint16_t* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(out + i, Rne8(Widen8(in + i)), Rne8(Widen8(in + i + 8)));
  Fp16ToBf16Scalar(in + i, out + i, n - i);
}

}  // namespace ckptscan::bf16::internal

#endif  // CKPT_BF16_X86
