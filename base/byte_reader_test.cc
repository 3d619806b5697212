#include "base/byte_reader.h"

#include <string>

#include "base/checked.h"
#include "gtest/gtest.h"

namespace ckptscan::base {
namespace {

TEST(ByteReaderTest, ReadsLittleEndianIntegersInOrder) {
  std::string data("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f", 15);
  ByteReader r(data, 100);
  EXPECT_EQ(*r.ReadU8(), 0x01);
  EXPECT_EQ(*r.ReadU16LE(), 0x0302);
  EXPECT_EQ(*r.ReadU32LE(), 0x07060504u);
  EXPECT_EQ(*r.ReadU64LE(), 0x0f0e0d0c0b0a0908ull);
  EXPECT_EQ(r.offset(), 115u);
  EXPECT_TRUE(r.empty());
}

TEST(ByteReaderTest, TruncatedReadFailsWithOffsetAndConsumesNothing) {
  ByteReader r(std::string_view("abc"), 40);
  ASSERT_TRUE(r.ReadU8().ok());
  auto v = r.ReadU32LE();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("offset 41"), std::string::npos) << v.status();
  EXPECT_EQ(r.offset(), 41u);
  EXPECT_FALSE(r.ReadBytes(3).ok());
  EXPECT_EQ(*r.ReadBytes(2), "bc");
}

TEST(ByteReaderTest, HugeDeclaredLengthIsRejectedWithoutOverflow) {
  ByteReader r(std::string_view("abcdef"));
  ASSERT_TRUE(r.Skip(2).ok());
  EXPECT_FALSE(r.ReadBytes(UINT64_MAX).ok());
  EXPECT_FALSE(r.Skip(UINT64_MAX - 1).ok());
  EXPECT_EQ(r.remaining(), 4u);
}

TEST(ByteReaderTest, ReadLineNeedsNewlineInsideWindow) {
  ByteReader r(std::string_view("ab\ncd\nef"));
  EXPECT_EQ(*r.ReadLine(), "ab\n");
  ASSERT_TRUE(r.SetEnd(4).ok());  // window ends inside "cd\n"
  EXPECT_FALSE(r.ReadLine().ok());
  ASSERT_TRUE(r.SetEnd(8).ok());
  EXPECT_EQ(*r.ReadLine(), "cd\n");
  EXPECT_FALSE(r.ReadLine().ok());  // "ef" has no newline
}

TEST(ByteReaderTest, SetEndOutsideDataIsRejected) {
  ByteReader r(std::string_view("abc"), 10);
  EXPECT_FALSE(r.SetEnd(9).ok());
  EXPECT_FALSE(r.SetEnd(14).ok());
  EXPECT_TRUE(r.SetEnd(13).ok());
}

TEST(CheckedTest, DetectsOverflowAndRanges) {
  uint64_t out;
  EXPECT_FALSE(CheckedAdd<uint64_t>(UINT64_MAX, 1, &out));
  EXPECT_TRUE(CheckedMul<uint64_t>(1ull << 31, 1ull << 31, &out));
  EXPECT_FALSE(CheckedMul<uint64_t>(1ull << 32, 1ull << 32, &out));
  EXPECT_TRUE(RangeWithin(2, 3, 5));
  EXPECT_FALSE(RangeWithin(3, 3, 5));
  EXPECT_FALSE(RangeWithin(6, 0, 5));
  EXPECT_FALSE(RangeWithin(1, UINT64_MAX, 5));
}

}  // namespace
}  // namespace ckptscan::base
