// AVX-512 kernels (F + BW + VL; optionally BF16). Compiled for baseline x86-64:
// only these functions carry the target attributes, and bf16.cc calls them only
// after checking the CPU.
#include "core/bf16/bf16_internal.h"

#if CKPT_BF16_X86
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass an "undefined" vector that GCC 12 itself
// reports as -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define CKPT_BF16_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define CKPT_BF16_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ckptscan::bf16::internal {
namespace {

// Sixteen fp32 bit patterns -> sixteen bf16, the integer RNE of bf16.h.
CKPT_BF16_AVX512 inline __m256i Rne16(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i result =
      _mm512_mask_or_epi32(rounded, is_nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  return _mm512_cvtepi32_epi16(result);  // vpmovdw: every lane < 2^16.
}

// vcvtneps2bf16 rounds like Rne16 and quiets NaNs the same way, but flushes
// subnormal inputs to signed zero. Lanes with a subnormal input (exponent 0,
// fraction != 0) are redone with Rne16; normal data skips that work.
CKPT_BF16_AVX512BF16 inline __m256i Bf16Exact16(__m512i u) {
  const __m256i hw = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(u));
  const __mmask16 subnormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000)) &
                              _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007FFFFF));
  if (subnormal == 0) return hw;
  return _mm256_mask_blend_epi16(subnormal, hw, Rne16(u));
}

// Masks for the last n % 16 elements: masked loads do not touch (or fault on)
// the masked-off memory.
CKPT_BF16_AVX512 inline __mmask16 TailMask(size_t rest) {
  return static_cast<__mmask16>((1u << rest) - 1u);
}

CKPT_BF16_AVX512 inline __m512i Widen16(const uint16_t* in) {
  return _mm512_castps_si512(
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
}

CKPT_BF16_AVX512 inline __m512i Widen16Masked(const uint16_t* in, __mmask16 m) {
  return _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in)));
}

CKPT_BF16_AVX512 inline void Store16(uint16_t* out, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
}

}  // namespace

CKPT_BF16_AVX512 void Fp32ToBf16Avx512(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(out + i, Rne16(_mm512_loadu_si512(in + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(out + i, m, Rne16(_mm512_maskz_loadu_epi32(m, in + i)));
  }
}

CKPT_BF16_AVX512 void Fp16ToBf16Avx512(const uint16_t* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(out + i, Rne16(Widen16(in + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(out + i, m, Rne16(Widen16Masked(in + i, m)));
  }
}

CKPT_BF16_AVX512BF16 void Fp32ToBf16Avx512Bf16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(out + i, Bf16Exact16(_mm512_loadu_si512(in + i)));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(out + i, m, Bf16Exact16(_mm512_maskz_loadu_epi32(m, in + i)));
  }
}

// fp16 widens to normal fp32 (never subnormal), so the instruction alone is exact.
CKPT_BF16_AVX512BF16 void Fp16ToBf16Avx512Bf16(const uint16_t* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    Store16(out + i, (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(Widen16(in + i))));
  }
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(
        out + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(Widen16Masked(in + i, m))));
  }
}

}  // namespace ckptscan::bf16::internal

#endif  // CKPT_BF16_X86
