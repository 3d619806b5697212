#include "core/bf16/bf16.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CKPT_BF16_TEST_X86 1
#else
#define CKPT_BF16_TEST_X86 0
#endif

namespace ckptscan::bf16 {
namespace {

uint16_t Ref(uint32_t bits) { return Fp32ToBf16Scalar(std::bit_cast<float>(bits)); }
uint32_t Fp16Bits(uint16_t h) { return std::bit_cast<uint32_t>(Fp16ToFp32Scalar(h)); }

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", v);
  return buf;
}

// ---- The reference against hand-checked cases ----------------------------

TEST(Fp32ToBf16ScalarTest, TieWithEvenLsbRoundsDown) {
  EXPECT_EQ(Ref(0x3F808000), 0x3F80);  // 1 + 2^-8: halfway, 0x3F80 is even.
  EXPECT_EQ(Ref(0xBF808000), 0xBF80);
}

TEST(Fp32ToBf16ScalarTest, TieWithOddLsbRoundsUp) {
  EXPECT_EQ(Ref(0x3F818000), 0x3F82);
  EXPECT_EQ(Ref(0xBF818000), 0xBF82);
}

TEST(Fp32ToBf16ScalarTest, OffTieRoundsToNearest) {
  EXPECT_EQ(Ref(0x3F807FFF), 0x3F80);
  EXPECT_EQ(Ref(0x3F808001), 0x3F81);
  EXPECT_EQ(Ref(0x3F817FFF), 0x3F81);
}

TEST(Fp32ToBf16ScalarTest, CarryPropagatesIntoExponent) {
  EXPECT_EQ(Ref(0x3FFFFFFF), 0x4000);  // 2 - 2^-23 -> 2.
  EXPECT_EQ(Ref(0x007FFFFF), 0x0080);  // Largest subnormal -> smallest normal.
}

TEST(Fp32ToBf16ScalarTest, LargestFiniteRoundsToInf) {
  EXPECT_EQ(Ref(0x7F7FFFFF), 0x7F80);
  EXPECT_EQ(Ref(0xFF7FFFFF), 0xFF80);
  EXPECT_EQ(Ref(0x7F7F8000), 0x7F80);  // Tie above the odd 0x7F7F: up, to Inf.
  EXPECT_EQ(Ref(0x7F7F7FFF), 0x7F7F);  // Just below the tie: largest finite bf16.
}

TEST(Fp32ToBf16ScalarTest, InfAndSignedZeroAreKept) {
  EXPECT_EQ(Ref(0x7F800000), 0x7F80);
  EXPECT_EQ(Ref(0xFF800000), 0xFF80);
  EXPECT_EQ(Ref(0x00000000), 0x0000);
  EXPECT_EQ(Ref(0x80000000), 0x8000);
}

TEST(Fp32ToBf16ScalarTest, SubnormalsRoundWithoutFlush) {
  EXPECT_EQ(Ref(0x00000001), 0x0000);  // Smallest fp32 subnormal: below half.
  EXPECT_EQ(Ref(0x00008000), 0x0000);  // Tie, even: down to +0.
  EXPECT_EQ(Ref(0x00008001), 0x0001);  // Just above the tie: smallest bf16 subnormal.
  EXPECT_EQ(Ref(0x00010000), 0x0001);  // Exactly the smallest bf16 subnormal.
  EXPECT_EQ(Ref(0x00018000), 0x0002);  // Tie, odd: up.
  EXPECT_EQ(Ref(0x0001FFFF), 0x0002);
  EXPECT_EQ(Ref(0x807FFFFF), 0x8080);
  EXPECT_EQ(Ref(0x80008001), 0x8001);
}

TEST(Fp32ToBf16ScalarTest, NanIsQuietedWithSignAndNeverBecomesInf) {
  EXPECT_EQ(Ref(0x7F800001), 0x7FC0);  // Payload only in the low half.
  EXPECT_EQ(Ref(0xFF800001), 0xFFC0);
  EXPECT_EQ(Ref(0x7FBFFFFF), 0x7FFF);  // Largest signalling NaN: no carry into sign.
  EXPECT_EQ(Ref(0x7FA00000), 0x7FE0);  // Top payload bits kept.
  EXPECT_EQ(Ref(0x7FC00000), 0x7FC0);
  EXPECT_EQ(Ref(0xFFFFFFFF), 0xFFFF);
}

// ---- fp16 widening --------------------------------------------------------

TEST(Fp16ToFp32ScalarTest, HandCheckedCases) {
  EXPECT_EQ(Fp16ToFp32Scalar(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToFp32Scalar(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32Scalar(0x0001), std::ldexp(1.0f, -24));  // Smallest subnormal.
  EXPECT_EQ(Fp16ToFp32Scalar(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32Scalar(0x0400), std::ldexp(1.0f, -14));  // Smallest normal.
  EXPECT_EQ(Fp16ToFp32Scalar(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16Bits(0x0000), 0x00000000u);
  EXPECT_EQ(Fp16Bits(0x8000), 0x80000000u);
  EXPECT_EQ(Fp16Bits(0x7C00), 0x7F800000u);
  EXPECT_EQ(Fp16Bits(0xFC00), 0xFF800000u);
  EXPECT_EQ(Fp16Bits(0x7C01), 0x7FC02000u);  // Signalling NaN: quieted, payload kept.
  EXPECT_EQ(Fp16Bits(0xFE00), 0xFFC00000u);
  EXPECT_EQ(Fp16Bits(0xFFFF), 0xFFFFE000u);
}

TEST(Fp16ToFp32ScalarTest, EveryFiniteValueMatchesArithmetic) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0x1F) continue;
    const float magnitude = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                                     : std::ldexp(static_cast<float>(mant | 0x400), int(exp) - 25);
    const float expected = (h & 0x8000) ? -magnitude : magnitude;
    ASSERT_EQ(std::bit_cast<uint32_t>(Fp16ToFp32Scalar(static_cast<uint16_t>(h))),
              std::bit_cast<uint32_t>(expected))
        << Hex(h);
  }
}

#if CKPT_BF16_TEST_X86
__attribute__((target("f16c"))) float HardwareWiden(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16ToFp32ScalarTest, EveryPatternMatchesF16cHardware) {
  const std::vector<Path> paths = AvailablePaths();  // kAvx2 requires F16C.
  if (std::find(paths.begin(), paths.end(), Path::kAvx2) == paths.end()) {
    GTEST_SKIP() << "CPU without AVX2 + F16C";
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(Fp16Bits(static_cast<uint16_t>(h)),
              std::bit_cast<uint32_t>(HardwareWiden(static_cast<uint16_t>(h))))
        << Hex(h);
  }
}
#endif

TEST(Fp16ToBf16Test, LargestFp16RoundsTo65536) {
  const uint16_t in[] = {0x7BFF, 0xFBFF};
  uint16_t out[2];
  Fp16ToBf16(in, out, 2);
  EXPECT_EQ(out[0], 0x4780);
  EXPECT_EQ(out[1], 0xC780);
}

// ---- Dispatch ----------------------------------------------------------------

TEST(DispatchTest, AvailablePathsStartWithScalarAndAscend) {
  const std::vector<Path> paths = AvailablePaths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), Path::kScalar);
  EXPECT_TRUE(std::is_sorted(paths.begin(), paths.end()));
  EXPECT_EQ(DispatchedPath(), paths.back());
  std::string names;
  for (Path p : paths) names += std::string(PathName(p)) + " ";
  std::printf("available: %s; dispatched: %s\n", names.c_str(),
              std::string(PathName(DispatchedPath())).c_str());
}

TEST(DispatchTest, UnknownPathIsRefusedAndWritesNothing) {
  const float in[1] = {1.0f};
  uint16_t out[1] = {0xABCD};
  const uint16_t in16[1] = {0x3C00};
  EXPECT_EQ(Fp32ToBf16OnPath(static_cast<Path>(99), in, out, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Fp16ToBf16OnPath(static_cast<Path>(99), in16, out, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out[0], 0xABCD);
}

// ---- Every path against the reference: all 2^32 fp32 inputs -------------------

constexpr int kShards = 16;  // ctest -j runs the shards in parallel.
constexpr uint64_t kShardSize = (uint64_t{1} << 32) / kShards;
constexpr size_t kChunk = 1 << 16;

class ExhaustiveFp32Test : public testing::TestWithParam<int> {};

TEST_P(ExhaustiveFp32Test, EveryPathMatchesReference) {
  // CKPT_EXHAUSTIVE=skip (Bazel's CI config): CI's CMake step runs these shards on the same
  // sources (docs/security.md, "CI").
  if (const char* e = std::getenv("CKPT_EXHAUSTIVE");
      e != nullptr && std::string_view(e) == "skip") {
    GTEST_SKIP() << "CKPT_EXHAUSTIVE=skip: exhaustive group, run by CI's CMake step";
  }
  const std::vector<Path> paths = AvailablePaths();
  std::vector<float> in(kChunk);
  std::vector<uint16_t> expected(kChunk), actual(kChunk);
  std::vector<uint64_t> mismatches(paths.size());
  const uint64_t begin = GetParam() * kShardSize;
  for (uint64_t base = begin; base < begin + kShardSize; base += kChunk) {
    for (size_t i = 0; i < kChunk; ++i) {
      const uint32_t bits = static_cast<uint32_t>(base + i);
      in[i] = std::bit_cast<float>(bits);
      expected[i] = Ref(bits);
    }
    for (size_t p = 0; p < paths.size(); ++p) {
      ASSERT_TRUE(Fp32ToBf16OnPath(paths[p], in.data(), actual.data(), kChunk).ok());
      if (actual == expected) continue;
      for (size_t i = 0; i < kChunk; ++i) {
        if (actual[i] == expected[i]) continue;
        if (++mismatches[p] <= 5) {
          ADD_FAILURE() << PathName(paths[p]) << ": " << Hex(static_cast<uint32_t>(base + i))
                        << " -> " << Hex(actual[i]) << ", reference " << Hex(expected[i]);
        }
      }
    }
  }
  for (size_t p = 0; p < paths.size(); ++p) {
    EXPECT_EQ(mismatches[p], 0u) << PathName(paths[p]);
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, ExhaustiveFp32Test, testing::Range(0, kShards));

TEST(ExhaustiveFp16Test, EveryPathMatchesWidenThenRound) {
  std::vector<uint16_t> in(0x10000), expected(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    in[h] = static_cast<uint16_t>(h);
    expected[h] = Fp32ToBf16Scalar(Fp16ToFp32Scalar(in[h]));
  }
  for (Path path : AvailablePaths()) {
    std::vector<uint16_t> actual(0x10000);
    ASSERT_TRUE(Fp16ToBf16OnPath(path, in.data(), actual.data(), in.size()).ok());
    for (uint32_t h = 0; h < 0x10000; ++h) {
      ASSERT_EQ(actual[h], expected[h]) << PathName(path) << " " << Hex(h);
    }
  }
}

// ---- Alignment and tails -------------------------------------------------------

// Interesting fp32 inputs, cycled: ties, subnormals, NaNs, Inf, overflow.
constexpr uint32_t kSpecials[] = {0x3F808000, 0x3F818000, 0x00018000, 0x807FFFFF, 0x7F800001,
                                  0xFF800001, 0x7F7FFFFF, 0xFF800000, 0x80000000, 0x0001FFFF,
                                  0x40490FDB, 0xC2F6E979, 0x7FC00000, 0x00000001, 0x3FFFFFFF};
constexpr uint16_t kFp16Specials[] = {0x7BFF, 0x0001, 0x03FF, 0x7C01, 0xFE00, 0x8000,
                                      0x3C00, 0xFC00, 0x3555, 0x0400, 0xC001};
constexpr uint16_t kCanary = 0xA5A5;
constexpr size_t kMaxTail = 64, kMaxOffset = 16;

// Each path, input offset 0..15 elements from a 64-byte boundary, output
// offset 0..15, every n in 0..64: the n outputs match and nothing around them
// is written.
TEST(AlignmentTest, Fp32EveryTailAndOffsetOnEveryPath) {
  alignas(64) float in[kMaxOffset + kMaxTail];
  for (size_t i = 0; i < std::size(in); ++i) {
    in[i] = std::bit_cast<float>(kSpecials[i % std::size(kSpecials)] ^ static_cast<uint32_t>(i));
  }
  for (Path path : AvailablePaths()) {
    for (size_t in_off = 0; in_off < kMaxOffset; ++in_off) {
      for (size_t out_off = 0; out_off < kMaxOffset; ++out_off) {
        for (size_t n = 0; n <= kMaxTail; ++n) {
          alignas(64) uint16_t out[kMaxOffset + kMaxTail + 16];
          std::fill(std::begin(out), std::end(out), kCanary);
          ASSERT_TRUE(Fp32ToBf16OnPath(path, in + in_off, out + out_off, n).ok());
          for (size_t i = 0; i < std::size(out); ++i) {
            const bool inside = i >= out_off && i < out_off + n;
            const uint16_t want = inside ? Fp32ToBf16Scalar(in[in_off + i - out_off]) : kCanary;
            ASSERT_EQ(out[i], want) << PathName(path) << " in_off=" << in_off
                                    << " out_off=" << out_off << " n=" << n << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(AlignmentTest, Fp16EveryTailAndOffsetOnEveryPath) {
  alignas(64) uint16_t in[kMaxOffset + kMaxTail];
  for (size_t i = 0; i < std::size(in); ++i) {
    in[i] = static_cast<uint16_t>(kFp16Specials[i % std::size(kFp16Specials)] ^ (i & 0x3));
  }
  for (Path path : AvailablePaths()) {
    for (size_t in_off = 0; in_off < kMaxOffset; ++in_off) {
      for (size_t out_off = 0; out_off < kMaxOffset; ++out_off) {
        for (size_t n = 0; n <= kMaxTail; ++n) {
          alignas(64) uint16_t out[kMaxOffset + kMaxTail + 16];
          std::fill(std::begin(out), std::end(out), kCanary);
          ASSERT_TRUE(Fp16ToBf16OnPath(path, in + in_off, out + out_off, n).ok());
          for (size_t i = 0; i < std::size(out); ++i) {
            const bool inside = i >= out_off && i < out_off + n;
            const uint16_t want =
                inside ? Fp32ToBf16Scalar(Fp16ToFp32Scalar(in[in_off + i - out_off])) : kCanary;
            ASSERT_EQ(out[i], want) << PathName(path) << " in_off=" << in_off
                                    << " out_off=" << out_off << " n=" << n << " i=" << i;
          }
        }
      }
    }
  }
}

// A null pointer with n == 0 is a valid empty range on every path.
TEST(AlignmentTest, EmptyRangeWithNullPointersIsANoOp) {
  for (Path path : AvailablePaths()) {
    EXPECT_TRUE(Fp32ToBf16OnPath(path, nullptr, nullptr, 0).ok());
    EXPECT_TRUE(Fp16ToBf16OnPath(path, nullptr, nullptr, 0).ok());
  }
  Fp32ToBf16(nullptr, nullptr, 0);
  Fp16ToBf16(nullptr, nullptr, 0);
}

}  // namespace
}  // namespace ckptscan::bf16
