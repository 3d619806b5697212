#include "core/safetensors/writer.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/safetensors/validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::safetensors {
namespace {

using ::testing::HasSubstr;

uint64_t Bytes(Dtype d, const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t x : shape) n *= x;
  return n * DtypeBits(d) / 8;
}

TensorSpec Spec(std::string name, Dtype d, std::vector<uint64_t> shape) {
  const uint64_t b = Bytes(d, shape);
  return TensorSpec{std::move(name), d, std::move(shape), b};
}

// The header followed by each tensor's bytes (filled with its placement index).
std::string Assemble(const SerializedHeader& h) {
  std::string f = h.bytes;
  for (size_t i = 0; i < h.placements.size(); ++i) {
    const Placement& p = h.placements[i];
    EXPECT_EQ(p.file_offset, f.size());
    f.append(p.data_end - p.data_begin, static_cast<char>('a' + i % 26));
  }
  EXPECT_EQ(f.size(), h.file_size);
  return f;
}

void ExpectWriterError(const std::vector<TensorSpec>& specs,
                       const std::map<std::string, std::string>& meta,
                       std::string_view message_part,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::StatusOr<SerializedHeader> h = SerializeHeader(specs, meta);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), code) << h.status();
  EXPECT_THAT(std::string(h.status().message()), HasSubstr(std::string(message_part)))
      << h.status();
}

// ---- Adversarial ----------------------------------------------------------------------------

TEST(WriterTest, DuplicateNames) {
  ExpectWriterError({Spec("a", Dtype::kF32, {1}), Spec("a", Dtype::kU8, {1})}, {},
                    "tensor #1 \"a\": duplicate name");
}

TEST(WriterTest, EmptyName) {
  ExpectWriterError({Spec("", Dtype::kF32, {1})}, {}, "name is empty");
}

TEST(WriterTest, NonUtf8Name) {
  ExpectWriterError({Spec("a\xff", Dtype::kF32, {1})}, {}, "not valid UTF-8");
}

TEST(WriterTest, NulInName) {
  ExpectWriterError({Spec(std::string("a\0b", 3), Dtype::kF32, {1})}, {}, "control character 0");
}

TEST(WriterTest, MetadataKeywordAsName) {
  ExpectWriterError({Spec("__metadata__", Dtype::kF32, {1})}, {}, "reserved key __metadata__");
}

TEST(WriterTest, ByteSizeDisagreesWithShape) {
  ExpectWriterError({TensorSpec{"a", Dtype::kF32, {3}, 8}}, {},
                    "byte_size 8, but 3 F32 elements take 12 bytes");
}

TEST(WriterTest, ShapeProductOverflow) {
  ExpectWriterError({TensorSpec{"a", Dtype::kU8, {1ull << 32, 1ull << 32}, 0}}, {},
                    "element count overflows 64 bits");
}

TEST(WriterTest, SubByteTensorNotWholeBytes) {
  ExpectWriterError({TensorSpec{"a", Dtype::kF4, {3}, 1}}, {}, "not a whole number of bytes");
}

TEST(WriterTest, RankOverLimit) {
  ExpectWriterError({Spec("a", Dtype::kU8, std::vector<uint64_t>(17, 1))}, {},
                    "rank 17 over the limit 16", absl::StatusCode::kResourceExhausted);
}

TEST(WriterTest, FormatOtherThanPt) {
  ExpectWriterError({}, {{"format", "tf"}}, "\"format\" must be \"pt\"");
}

TEST(WriterTest, MetadataWithNul) {
  ExpectWriterError({}, {{"k", std::string("a\0", 2)}}, "contains NUL");
}

TEST(WriterTest, MetadataNotUtf8) { ExpectWriterError({}, {{"k\xc0", "v"}}, "not valid UTF-8"); }

// ---- Output ---------------------------------------------------------------------------------

TEST(WriterTest, ExactBytesForASmallFile) {
  absl::StatusOr<SerializedHeader> h = SerializeHeader(
      std::vector<TensorSpec>{Spec("w", Dtype::kU8, {3}), Spec("b", Dtype::kF32, {})},
      {{"source", "x\"y"}});
  ASSERT_TRUE(h.ok()) << h.status();
  const std::string json = R"({"__metadata__":{"format":"pt","source":"x\"y"},)"
                           R"("b":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"U8","shape":[3],"data_offsets":[4,7]}})";
  std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  ASSERT_EQ(h->bytes.size(), 8 + padded.size());
  EXPECT_EQ(h->bytes.substr(8), padded);
  EXPECT_EQ(static_cast<unsigned char>(h->bytes[0]), padded.size());
  EXPECT_EQ(h->bytes.size() % 8, 0u);
  ASSERT_EQ(h->placements.size(), 2u);
  EXPECT_EQ(h->placements[0].spec_index, 1u);
  EXPECT_EQ(h->placements[1].spec_index, 0u);
  EXPECT_EQ(h->file_size, h->bytes.size() + 7);
}

TEST(WriterTest, OrderIsDtypeDescendingThenName) {
  std::vector<TensorSpec> specs;
  for (Dtype d : AllDtypes()) {
    specs.push_back(Spec(std::string("z_") + std::string(DtypeName(d)), d, {8}));
    specs.push_back(Spec(std::string("a_") + std::string(DtypeName(d)), d, {8}));
  }
  absl::StatusOr<SerializedHeader> h = SerializeHeader(specs, {});
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->placements.size(), specs.size());
  for (size_t i = 1; i < h->placements.size(); ++i) {
    const TensorSpec& prev = specs[h->placements[i - 1].spec_index];
    const TensorSpec& cur = specs[h->placements[i].spec_index];
    EXPECT_TRUE(prev.dtype > cur.dtype || (prev.dtype == cur.dtype && prev.name < cur.name))
        << prev.name << " before " << cur.name;
  }
  EXPECT_EQ(specs[h->placements.front().spec_index].name, "a_U64");
  EXPECT_EQ(specs[h->placements.back().spec_index].name, "z_BOOL");
  // Every tensor whose element is whole bytes lands at a multiple of its element size.
  for (const Placement& p : h->placements) {
    const uint32_t bits = DtypeBits(specs[p.spec_index].dtype);
    if (bits % 8 == 0) {
      EXPECT_EQ(p.file_offset % (bits / 8), 0u) << specs[p.spec_index].name;
    }
  }
}

TEST(WriterTest, OutputValidatesAndRoundTrips) {
  std::vector<TensorSpec> specs = {
      Spec("layer.0.weight", Dtype::kBF16, {4, 3}),
      Spec("layer.0.bias", Dtype::kF32, {3}),
      Spec("empty", Dtype::kF16, {2, 0}),
      Spec("scalar", Dtype::kI64, {}),
      Spec("mask", Dtype::kBool, {5}),
      Spec("packed", Dtype::kF4, {6}),
      Spec("\xc3\xa9t\xc3\xa9", Dtype::kC64, {2}),
  };
  std::map<std::string, std::string> meta = {{"source_sha256", "00ff"}, {"alias", "a\nb"}};
  absl::StatusOr<SerializedHeader> h = SerializeHeader(specs, meta);
  ASSERT_TRUE(h.ok()) << h.status();
  const std::string file = Assemble(*h);
  absl::StatusOr<Layout> l = Validate(file, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->data_start, h->bytes.size());
  EXPECT_EQ(l->data_start % 8, 0u);
  ASSERT_EQ(l->tensors.size(), specs.size());
  // Layout is in data order; placements are in file order: they must agree one to one.
  for (size_t i = 0; i < specs.size(); ++i) {
    const Placement& p = h->placements[i];
    const TensorSpec& s = specs[p.spec_index];
    const TensorLayout* t = nullptr;
    for (const TensorLayout& x : l->tensors) {
      if (x.name == s.name) t = &x;
    }
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->dtype, s.dtype);
    EXPECT_EQ(t->shape, s.shape);
    EXPECT_EQ(t->begin, p.file_offset);
    EXPECT_EQ(t->end - t->begin, s.byte_size);
  }
  EXPECT_TRUE(l->has_metadata);
  EXPECT_EQ(l->metadata.at("format"), "pt");
  EXPECT_EQ(l->metadata.at("alias"), "a\nb");
  EXPECT_EQ(l->metadata.at("source_sha256"), "00ff");
  EXPECT_EQ(l->metadata.size(), 3u);
}

TEST(WriterTest, EmptyInputStillHasFormatPt) {
  absl::StatusOr<SerializedHeader> h = SerializeHeader({}, {});
  ASSERT_TRUE(h.ok()) << h.status();
  // 32 bytes of JSON: already a multiple of 8, so no padding.
  EXPECT_EQ(h->bytes.substr(8), R"({"__metadata__":{"format":"pt"}})");
  absl::StatusOr<Layout> l = Validate(h->bytes, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->tensors.empty());
}

TEST(WriterTest, ZeroSizeAndZeroDimTensors) {
  std::vector<TensorSpec> specs = {Spec("zero", Dtype::kF32, {0, 7}),
                                   Spec("scalar", Dtype::kF32, {})};
  absl::StatusOr<SerializedHeader> h = SerializeHeader(specs, {});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->placements[0].spec_index, 1u);  // "scalar" < "zero"
  EXPECT_EQ(h->placements[0].data_end, 4u);
  EXPECT_EQ(h->placements[1].data_begin, 4u);
  EXPECT_EQ(h->placements[1].data_end, 4u);
  absl::StatusOr<Layout> l = Validate(Assemble(*h), {});
  ASSERT_TRUE(l.ok()) << l.status();
}

TEST(WriterTest, EveryDtypeRoundTrips) {
  for (Dtype d : AllDtypes()) {
    absl::StatusOr<SerializedHeader> h =
        SerializeHeader(std::vector<TensorSpec>{Spec("t", d, {2, 4})}, {});
    ASSERT_TRUE(h.ok()) << DtypeName(d) << ": " << h.status();
    EXPECT_THAT(h->bytes, HasSubstr("\"dtype\":\"" + std::string(DtypeName(d)) + "\""));
    absl::StatusOr<Layout> l = Validate(Assemble(*h), {});
    ASSERT_TRUE(l.ok()) << DtypeName(d) << ": " << l.status();
    EXPECT_EQ(l->tensors[0].dtype, d);
    EXPECT_EQ(l->tensors[0].end - l->tensors[0].begin, 8u * DtypeBits(d) / 8);
  }
}

TEST(WriterTest, ByteIdenticalAcrossRunsAndInputOrder) {
  std::vector<TensorSpec> specs = {Spec("b", Dtype::kF16, {3}), Spec("a", Dtype::kF16, {3}),
                                   Spec("c", Dtype::kU8, {1}), Spec("d", Dtype::kF64, {1})};
  std::vector<TensorSpec> reversed(specs.rbegin(), specs.rend());
  std::map<std::string, std::string> meta = {{"z", "1"}, {"a", "2"}};
  absl::StatusOr<SerializedHeader> h1 = SerializeHeader(specs, meta);
  absl::StatusOr<SerializedHeader> h2 = SerializeHeader(specs, meta);
  absl::StatusOr<SerializedHeader> h3 = SerializeHeader(reversed, meta);
  ASSERT_TRUE(h1.ok() && h2.ok() && h3.ok());
  EXPECT_EQ(h1->bytes, h2->bytes);
  EXPECT_EQ(h1->bytes, h3->bytes);
}

TEST(WriterTest, ControlCharactersInMetadataAreEscaped) {
  absl::StatusOr<SerializedHeader> h = SerializeHeader({}, {{"k", "\x01\t\\"}});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_THAT(h->bytes, HasSubstr(R"("k":"\u0001\t\\")"));
  absl::StatusOr<Layout> l = Validate(h->bytes, {});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->metadata.at("k"), "\x01\t\\");
}

}  // namespace
}  // namespace ckptscan::safetensors
