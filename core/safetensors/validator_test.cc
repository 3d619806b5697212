#include "core/safetensors/validator.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::safetensors {
namespace {

using ::testing::HasSubstr;

std::string Le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return s;
}

// 8-byte length + header + data.
std::string File(std::string_view header, std::string_view data = "") {
  return Le64(header.size()) + std::string(header) + std::string(data);
}

absl::Status Check(const std::string& file, const ValidatorLimits& limits = {}) {
  return Validate(file, limits).status();
}

void ExpectRejected(const std::string& file, std::string_view message_part,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::Status s = Check(file);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(message_part))) << s;
}

constexpr char kOneF32[] = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

// ---- Adversarial: length prefix -------------------------------------------------------------

TEST(ValidatorTest, FileShorterThanLengthPrefix) {
  ExpectRejected("1234567", "too small for the 8-byte header length");
}

TEST(ValidatorTest, HeaderLengthLargerThanFile) {
  std::string f = Le64(100) + "{}";
  ExpectRejected(f, "header length 100 runs past the end of the 10-byte file");
}

TEST(ValidatorTest, HugeHeaderLengthIsOverTheLimit) {
  ExpectRejected(Le64(~uint64_t{0}) + "{}", "(max_header_bytes;",
                 absl::StatusCode::kResourceExhausted);
  ExpectRejected(Le64(100'000'001) + "{}", "over the limit 100000000",
                 absl::StatusCode::kResourceExhausted);
}

// The limit a status names (base::LimitError), as a report's limit_name / limit_value.
void ExpectLimit(const absl::Status& s, std::string_view name, uint64_t value) {
  std::optional<base::LimitHit> hit = base::LimitOf(s);
  ASSERT_TRUE(hit.has_value()) << s;
  EXPECT_EQ(hit->name, name);
  EXPECT_EQ(hit->value, value);
}

TEST(ValidatorTest, HeaderLimitIsConfigurable) {
  ValidatorLimits limits;
  limits.max_header_bytes = 4;
  absl::Status s = Check(File("{}      "), limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  ExpectLimit(s, "max_header_bytes", 4);
}

// ---- Adversarial: header text ---------------------------------------------------------------

TEST(ValidatorTest, NonUtf8Header) {
  ExpectRejected(File("{\"a\xff\":1}"), "not valid UTF-8 (byte 0xff) (at byte offset 11)");
}

TEST(ValidatorTest, OverlongUtf8Header) {
  ExpectRejected(File("{\"\xc0\xaf\":1}"), "not valid UTF-8");
}

TEST(ValidatorTest, SurrogateUtf8Header) {
  ExpectRejected(File("{\"\xed\xa0\x80\":1}"), "not valid UTF-8");
}

TEST(ValidatorTest, NotJson) { ExpectRejected(File("{nope}"), "header is not valid JSON"); }

TEST(ValidatorTest, TruncatedJson) {
  ExpectRejected(File(R"({"a":{"dtype":"F32")"), "header is not valid JSON");
}

TEST(ValidatorTest, TopLevelArray) { ExpectRejected(File("[]"), "header must start with '{'"); }

TEST(ValidatorTest, EmptyHeader) { ExpectRejected(File(""), "header is empty"); }

TEST(ValidatorTest, AllSpacesHeader) { ExpectRejected(File("        "), "header is empty"); }

TEST(ValidatorTest, ByteOrderMarkBeforeObject) {
  ExpectRejected(File("\xef\xbb\xbf{}"), "header must start with '{'");
}

TEST(ValidatorTest, LeadingNewlineBeforeObject) {
  // The reference accepts it; the strict profile allows only spaces before '{'.
  ExpectRejected(File("\n{}"), "found byte 0x0a (at byte offset 8)");
}

TEST(ValidatorTest, TrailingNulPadding) {
  ExpectRejected(File(std::string("{}\0\0\0\0\0\0", 8)),
                 "byte 0x00 after the header's JSON object; only padding spaces may follow it "
                 "(at byte offset 10)");
}

TEST(ValidatorTest, SecondJsonValueAfterObject) {
  ExpectRejected(File("{} {}   "), "byte 0x7b after the header's JSON object");
}

TEST(ValidatorTest, TrailingGarbage) {
  ExpectRejected(File("{}x"), "byte 0x78 after the header's JSON object");
}

TEST(ValidatorTest, TrailingComma) {
  ExpectRejected(File("{\"__metadata__\":{},}"), "not valid JSON");
}

TEST(ValidatorTest, Comment) { ExpectRejected(File("{/*x*/}"), "not valid JSON"); }

// ---- Adversarial: duplicate and unknown keys ------------------------------------------------

TEST(ValidatorTest, DuplicateTensorKeyWithDifferentOffsets) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      "xx"),
                 "duplicate key \"a\" in the header");
}

TEST(ValidatorTest, DuplicateTensorKeyWithIdenticalEntries) {
  // The reference silently collapses these to one tensor and accepts the file.
  const std::string e = R"("a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  ExpectRejected(File("{" + e + "," + e + "}", "x"), "duplicate key \"a\"");
}

TEST(ValidatorTest, DuplicateMetadataKeyword) {
  ExpectRejected(File(R"({"__metadata__":{},"__metadata__":{}})"),
                 "duplicate key \"__metadata__\"");
}

TEST(ValidatorTest, DuplicateKeyInsideMetadata) {
  ExpectRejected(File(R"({"__metadata__":{"k":"1","k":"2"}})"),
                 "duplicate key \"k\" in __metadata__");
}

TEST(ValidatorTest, DuplicateFieldInsideTensor) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "tensor \"a\": duplicate field \"dtype\"");
}

TEST(ValidatorTest, UnknownTensorField) {
  ExpectRejected(
      File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"strides":[1]}})", "x"),
      "tensor \"a\": unknown field \"strides\"");
}

TEST(ValidatorTest, MissingField) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[0]}})"),
                 "tensor \"a\": missing field \"data_offsets\"");
}

// ---- Adversarial: names ---------------------------------------------------------------------

TEST(ValidatorTest, EmptyTensorName) {
  ExpectRejected(File(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "tensor name \"\" is empty");
}

TEST(ValidatorTest, NulInTensorName) {
  ExpectRejected(File(R"({"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "contains control character 0");
}

TEST(ValidatorTest, NewlineInTensorName) {
  ExpectRejected(File(R"({"a\nb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "contains control character 10");
}

// ---- Adversarial: dtype and shape -----------------------------------------------------------

TEST(ValidatorTest, UnknownDtype) {
  ExpectRejected(File(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", "x"),
                 "tensor \"a\": unknown dtype \"Q8\"");
}

TEST(ValidatorTest, LowercaseDtype) {
  ExpectRejected(File(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "xxxx"),
                 "unknown dtype \"f32\"");
}

TEST(ValidatorTest, DtypeNotAString) {
  ExpectRejected(File(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", "x"),
                 "dtype must be a string, found a number");
}

TEST(ValidatorTest, NegativeShapeEntry) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,1]}})", "x"),
                 "tensor \"a\": shape entry 1 is negative (-1)");
}

TEST(ValidatorTest, NegativeZeroShapeEntry) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}})"),
                 "shape entry 0 is written with a minus sign");
}

TEST(ValidatorTest, FloatShapeEntry) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "x"),
                 "shape entry 0 is not an integer (1.0)");
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}})", "x"),
                 "shape entry 0 is not an integer (1e0)");
}

TEST(ValidatorTest, HugeShapeEntry) {
  ExpectRejected(
      File(R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", "x"),
      "shape entry 0 is an integer too large for 64 bits (18446744073709551616)");
}

TEST(ValidatorTest, StringShapeEntry) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})", "x"),
                 "shape entry 0 must be a non-negative integer, found a string");
}

TEST(ValidatorTest, NestedArrayShapeEntry) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", "x"),
                 "shape entry 0 must be a non-negative integer, found an array");
}

TEST(ValidatorTest, ShapeProductOverflow) {
  ExpectRejected(
      File(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      "element count of shape [4294967296,4294967296] overflows 64 bits");
}

TEST(ValidatorTest, BitSizeOverflow) {
  ExpectRejected(
      File(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
      "bit size of 4611686018427387904 F64 elements overflows 64 bits");
}

TEST(ValidatorTest, RankOverLimit) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],)"
                      R"("data_offsets":[0,1]}})",
                      "x"),
                 "rank 17 is over the limit 16 (max_rank",
                 absl::StatusCode::kResourceExhausted);
}

TEST(ValidatorTest, TensorCountOverLimit) {
  ValidatorLimits limits;
  limits.max_tensors = 1;
  absl::Status s = Check(File(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                              R"("b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
                         limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_safetensors_tensors"));
  ExpectLimit(s, "max_safetensors_tensors", 1);
}

TEST(ValidatorTest, SubByteTensorNotWholeBytes) {
  ExpectRejected(File(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", "x"),
                 "3 F4 elements (12 bits) are not a whole number of bytes");
}

TEST(ValidatorTest, ByteLengthDisagreesWithShape) {
  ExpectRejected(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx"),
                 "data_offsets [0, 4] span 4 bytes, but shape [2] of F32 needs 8");
}

// ---- Adversarial: offsets and coverage ------------------------------------------------------

TEST(ValidatorTest, OffsetsEndBeforeBegin) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", "xxxx"),
                 "tensor \"a\": data_offsets [4, 0] end before begin");
}

TEST(ValidatorTest, OffsetsWrongArity) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"),
                 "data_offsets entry 2 is extra");
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1]}})", "x"),
                 "data_offsets has 1 entries, expected 2");
}

TEST(ValidatorTest, NegativeOffset) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"),
                 "data_offsets entry 0 is negative (-1)");
}

TEST(ValidatorTest, GapBetweenTensors) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
                      "xyz"),
                 "tensor \"b\": data_offsets [2, 3] leave a gap: data bytes [1, 2)");
}

TEST(ValidatorTest, GapBeforeFirstTensor) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", "xy"),
                 "leave a gap: data bytes [0, 1)");
}

TEST(ValidatorTest, OverlappingTensors) {
  ExpectRejected(File(R"({"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]},)"
                      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      "xy"),
                 "tensor \"b\": data_offsets [1, 2] overlap tensor \"a\", which ends at 2");
}

TEST(ValidatorTest, TwoTensorsOverTheSameBytes) {
  ExpectRejected(File(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                      R"("b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
                      "xy"),
                 "overlap tensor");
}

TEST(ValidatorTest, TensorEndsPastTheBuffer) {
  ExpectRejected(File(kOneF32, "xxxx"),
                 "tensor \"a\": data_offsets [0, 8] run past the end of the 4-byte data buffer");
}

TEST(ValidatorTest, BufferLongerThanLastTensor) {
  const std::string header = kOneF32;
  ExpectRejected(File(header, "12345678PK"),
                 "the data buffer has 2 bytes after the last tensor that belong to no tensor");
}

TEST(ValidatorTest, DataWithNoTensors) {
  ExpectRejected(File("{}", "x"), "1 bytes after the last");
}

// ---- Adversarial: metadata ------------------------------------------------------------------

TEST(ValidatorTest, MetadataValueNotAString) {
  ExpectRejected(File(R"({"__metadata__":{"n":1}})"),
                 "__metadata__ value of \"n\" must be a string, found a number");
}

TEST(ValidatorTest, MetadataNestedObject) {
  ExpectRejected(File(R"({"__metadata__":{"n":{"x":"y"}}})"),
                 "__metadata__ value of \"n\" must be a string, found an object");
}

TEST(ValidatorTest, MetadataNotAnObject) {
  ExpectRejected(File(R"({"__metadata__":"pt"})"),
                 "__metadata__ must be an object of strings (or null), found a string");
}

TEST(ValidatorTest, MetadataValueWithNul) {
  ExpectRejected(File(R"({"__metadata__":{"k":"a\u0000b"}})"), "contains NUL");
}

TEST(ValidatorTest, TensorEntryNotAnObject) {
  ExpectRejected(File(R"({"a":[1]})"), "tensor \"a\": entry must be an object, found an array");
}

TEST(ValidatorTest, ErrorNamesEscapedTensorAndOffset) {
  absl::Status s = Check(File(R"({"\u202e":{"dtype":"XX","shape":[],"data_offsets":[0,1]}})", "x"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tensor \"\\u{202e}\": unknown dtype \"XX\" (at byte offset 31)"))
      << s;
}

// ---- Accepted ------------------------------------------------------------------------------

TEST(ValidatorTest, EmptyObjectPaddedWithSpaces) {
  absl::StatusOr<Layout> l = Validate(File("{}      "), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->header_length, 8u);
  EXPECT_EQ(l->data_start, 16u);
  EXPECT_TRUE(l->tensors.empty());
  EXPECT_FALSE(l->has_metadata);
}

TEST(ValidatorTest, LeadingSpacesAndTrailingJsonWhitespaceAccepted) {
  ASSERT_TRUE(Validate(File("  {} \t\r\n "), {}).ok());
}

TEST(ValidatorTest, NullMetadataAccepted) {
  absl::StatusOr<Layout> l = Validate(File(R"({"__metadata__":null})"), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_FALSE(l->has_metadata);
}

TEST(ValidatorTest, HeaderKeyOrderIndependentOfDataOrder) {
  // Older writers used name order; the reference sorts by data_offsets.
  absl::StatusOr<Layout> l =
      Validate(File(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},)"
                    R"("b":{"dtype":"U16","shape":[],"data_offsets":[0,2]},)"
                    R"("__metadata__":{"format":"pt","z":"\n"}})",
                    "xyz"),
               {});
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->tensors.size(), 2u);
  EXPECT_EQ(l->tensors[0].name, "b");
  EXPECT_TRUE(l->tensors[0].shape.empty());
  EXPECT_EQ(l->tensors[0].dtype, Dtype::kU16);
  EXPECT_EQ(l->tensors[0].begin, l->data_start);
  EXPECT_EQ(l->tensors[0].end, l->data_start + 2);
  EXPECT_EQ(l->tensors[1].name, "a");
  EXPECT_EQ(l->tensors[1].end, l->file_size);
  EXPECT_TRUE(l->has_metadata);
  EXPECT_EQ(l->metadata.at("format"), "pt");
  EXPECT_EQ(l->metadata.at("z"), "\n");
}

TEST(ValidatorTest, ZeroSizeTensorsShareAnOffset) {
  absl::StatusOr<Layout> l =
      Validate(File(R"({"a":{"dtype":"F32","shape":[2,0],"data_offsets":[4,4]},)"
                    R"("b":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                    R"("c":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
                    "abcd"),
               {});
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->tensors.size(), 3u);
  EXPECT_EQ(l->tensors[1].begin, l->tensors[1].end);
}

TEST(ValidatorTest, EveryDtypeName) {
  for (Dtype d : AllDtypes()) {
    const uint64_t bytes = DtypeBits(d);  // 8 elements -> bits bytes
    const std::string h = "{\"t\":{\"dtype\":\"" + std::string(DtypeName(d)) +
                          "\",\"shape\":[8],\"data_offsets\":[0," + std::to_string(bytes) + "]}}";
    absl::StatusOr<Layout> l = Validate(File(h, std::string(bytes, '\0')), {});
    ASSERT_TRUE(l.ok()) << DtypeName(d) << ": " << l.status();
    EXPECT_EQ(l->tensors[0].dtype, d);
  }
  EXPECT_EQ(AllDtypes().size(), 22u);
}

TEST(ValidatorTest, ValidateHeaderNeedsOnlyThePrefix) {
  const std::string f = File(kOneF32, "12345678");
  absl::StatusOr<Layout> l =
      ValidateHeader(std::string_view(f).substr(0, f.size() - 8), f.size(), {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->tensors[0].end, f.size());
}

TEST(ValidatorTest, ValidateHeaderRejectsShortPrefix) {
  const std::string f = File(kOneF32, "12345678");
  EXPECT_FALSE(ValidateHeader(std::string_view(f).substr(0, 12), f.size(), {}).ok());
}

}  // namespace
}  // namespace ckptscan::safetensors
