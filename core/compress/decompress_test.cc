#include "core/compress/decompress.h"

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <zlib.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/limit_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ckptscan::compress {
namespace {

using ::testing::HasSubstr;

std::string Deflate(std::string_view data, int wbits) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Bz2(std::string_view data) {
  std::string out(data.size() + data.size() / 100 + 700, '\0');
  unsigned int len = static_cast<unsigned int>(out.size());
  EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &len, const_cast<char*>(data.data()),
                                     static_cast<unsigned int>(data.size()), 9, 0, 0),
            BZ_OK);
  out.resize(len);
  return out;
}

std::string Xz(std::string_view data) {
  std::string out(lzma_stream_buffer_bound(data.size()), '\0');
  size_t pos = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr,
                                    reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                                    reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()),
            LZMA_OK);
  out.resize(pos);
  return out;
}

std::string LzmaAlone(std::string_view data) {
  lzma_options_lzma opt;
  EXPECT_FALSE(lzma_lzma_preset(&opt, 6));
  lzma_stream ls = LZMA_STREAM_INIT;
  EXPECT_EQ(lzma_alone_encoder(&ls, &opt), LZMA_OK);
  std::string out(data.size() * 2 + 1024, '\0');
  ls.next_in = reinterpret_cast<const uint8_t*>(data.data());
  ls.avail_in = data.size();
  ls.next_out = reinterpret_cast<uint8_t*>(out.data());
  ls.avail_out = out.size();
  EXPECT_EQ(lzma_code(&ls, LZMA_FINISH), LZMA_STREAM_END);
  out.resize(ls.total_out);
  lzma_end(&ls);
  return out;
}

std::string Lz4(std::string_view data) {
  std::string out(LZ4F_compressFrameBound(data.size(), nullptr), '\0');
  const size_t n = LZ4F_compressFrame(out.data(), out.size(), data.data(), data.size(), nullptr);
  EXPECT_FALSE(LZ4F_isError(n));
  out.resize(n);
  return out;
}

std::string Compress(Codec codec, std::string_view data) {
  switch (codec) {
    case Codec::kZlib: return Deflate(data, 15);
    case Codec::kGzip: return Deflate(data, 31);
    case Codec::kBz2: return Bz2(data);
    case Codec::kLzma: return LzmaAlone(data);
    case Codec::kXz: return Xz(data);
    case Codec::kLz4: return Lz4(data);
  }
  return "";
}

constexpr Codec kAll[] = {Codec::kZlib, Codec::kGzip, Codec::kBz2,
                          Codec::kLzma, Codec::kXz,   Codec::kLz4};

std::string Text(size_t n) {
  std::string s;
  for (size_t i = 0; s.size() < n; ++i) s += "line " + std::to_string(i * 7919 % 10007) + "\n";
  s.resize(n);
  return s;
}

Decompressed Decode(std::string_view data, Codec codec, const Limits& limits = {},
                 Streams streams = Streams::kJoblib) {
  absl::StatusOr<Decompressed> d = DecompressJoblib(data, codec, limits, streams);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : Decompressed{};
}

TEST(DetectJoblibCodecTest, EveryJoblibPrefixNamesItsCodec) {
  for (Codec c : kAll) {
    const std::string z = Compress(c, "abc");
    ASSERT_EQ(DetectJoblibCodec(z), c) << CodecName(c);
  }
}

TEST(DetectJoblibCodecTest, ASingleXIsZlibAndZFIsCompatNotACodec) {
  EXPECT_EQ(DetectJoblibCodec("x"), Codec::kZlib);
  EXPECT_EQ(DetectJoblibCodec("BZ"), Codec::kBz2);
  EXPECT_EQ(DetectJoblibCodec(std::string("\x5d\x00", 2)), Codec::kLzma);
  EXPECT_EQ(DetectJoblibCodec("ZF"), std::nullopt);
  EXPECT_TRUE(IsJoblibCompat("ZF\x00"));
  EXPECT_EQ(DetectJoblibCodec("\x80\x04"), std::nullopt);
  EXPECT_EQ(DetectJoblibCodec(std::string("\x28\xb5\x2f\xfd", 4)), std::nullopt);  // zstd
}

TEST(DecompressTest, EveryCodecRoundTrips) {
  const std::string text = Text(300000);
  for (Codec c : kAll) {
    const Decompressed d = Decode(Compress(c, text), c);
    EXPECT_EQ(d.end, End::kClean) << CodecName(c) << " " << d.stop;
    EXPECT_TRUE(d.bytes == text) << CodecName(c) << " " << d.bytes.size();
    EXPECT_EQ(d.streams, 1u) << CodecName(c);
    EXPECT_EQ(d.trailing_bytes, 0u) << CodecName(c);
  }
}

TEST(DecompressTest, ZlibAndGzipReadOnlyTheFirstStream) {
  for (Codec c : {Codec::kZlib, Codec::kGzip}) {
    const std::string first = Compress(c, "first");
    const Decompressed d = Decode(first + Compress(c, "second"), c);
    EXPECT_EQ(d.end, End::kClean) << CodecName(c);
    EXPECT_EQ(d.bytes, "first") << CodecName(c);
    EXPECT_EQ(d.trailing_offset, first.size()) << CodecName(c);
    EXPECT_GT(d.trailing_bytes, 0u) << CodecName(c);
  }
}

TEST(DecompressTest, AllStreamsModeReadsTheSecondGzipMember) {
  const Decompressed d = Decode(Compress(Codec::kGzip, "first") + Compress(Codec::kGzip, "second"),
                             Codec::kGzip, {}, Streams::kAll);
  EXPECT_EQ(d.end, End::kClean);
  EXPECT_EQ(d.bytes, "firstsecond");
  EXPECT_EQ(d.streams, 2u);
}

TEST(DecompressTest, Bz2LzmaXzAndLz4ReadConcatenatedStreams) {
  for (Codec c : {Codec::kBz2, Codec::kLzma, Codec::kXz, Codec::kLz4}) {
    const Decompressed d = Decode(Compress(c, "first") + Compress(c, "second"), c);
    EXPECT_EQ(d.end, End::kClean) << CodecName(c) << " " << d.stop;
    EXPECT_EQ(d.bytes, "firstsecond") << CodecName(c);
    EXPECT_EQ(d.streams, 2u) << CodecName(c);
  }
}

TEST(DecompressTest, LzmaPrefixFileReadsAnXzSecondStream) {
  // LZMAFile's FORMAT_AUTO decides per stream.
  const Decompressed d =
      Decode(Compress(Codec::kLzma, "alone") + Compress(Codec::kXz, "xz"), Codec::kLzma);
  EXPECT_EQ(d.end, End::kClean) << d.stop;
  EXPECT_EQ(d.bytes, "alonexz");
}

TEST(DecompressTest, Bz2AndXzIgnoreTrailingGarbage) {
  for (Codec c : {Codec::kBz2, Codec::kXz}) {
    const std::string z = Compress(c, "data");
    const Decompressed d = Decode(z + "garbage!", c);
    EXPECT_EQ(d.end, End::kClean) << CodecName(c) << " " << d.stop;
    EXPECT_EQ(d.bytes, "data") << CodecName(c);
    EXPECT_EQ(d.trailing_offset, z.size()) << CodecName(c);
    EXPECT_EQ(d.trailing_bytes, 8u) << CodecName(c);
  }
}

TEST(DecompressTest, Lz4TrailingGarbageIsCorrupt) {
  const Decompressed d = Decode(Compress(Codec::kLz4, "data") + "garbage!", Codec::kLz4);
  EXPECT_EQ(d.end, End::kCorrupt);
  EXPECT_EQ(d.bytes, "data");
}

TEST(DecompressTest, TruncatedStreamKeepsTheDecodedPrefix) {
  const std::string text = Text(2 << 20);
  for (Codec c : kAll) {
    const std::string z = Compress(c, text);
    const Decompressed d = Decode(std::string_view(z).substr(0, z.size() - 10), c);
    EXPECT_EQ(d.end, End::kTruncated) << CodecName(c) << " " << d.stop;
    EXPECT_FALSE(d.stop.ok()) << CodecName(c);
    EXPECT_LE(d.bytes.size(), text.size()) << CodecName(c);
    EXPECT_TRUE(d.bytes == text.substr(0, d.bytes.size())) << CodecName(c);
  }
}

TEST(DecompressTest, CorruptStreamStopsWithItsOffset) {
  const std::string text = Text(1 << 20);
  // lz4 is left out: a frame without checksums (python-lz4's default) decodes flipped bytes
  // into other bytes, for LZ4FrameFile as here.
  for (Codec c : {Codec::kZlib, Codec::kGzip, Codec::kBz2, Codec::kLzma, Codec::kXz}) {
    std::string z = Compress(c, text);
    for (size_t i = z.size() / 2; i < z.size() / 2 + 64; ++i) z[i] = static_cast<char>(~z[i]);
    const Decompressed d = Decode(z, c);
    EXPECT_EQ(d.end, End::kCorrupt) << CodecName(c) << " " << d.stop;
    EXPECT_LE(d.stop_offset, z.size()) << CodecName(c);
    EXPECT_THAT(std::string(d.stop.message()), HasSubstr(std::string(CodecName(c))));
  }
}

TEST(DecompressTest, NotAStreamAtAllIsCorruptWithNothingDecoded) {
  const std::string magics[] = {"\x78", "\x1f\x8b", "BZ", std::string("\x5d\x00", 2),
                                "\xfd\x37\x7a\x58\x5a", "\x04\x22\x4d\x18"};
  for (const std::string& magic : magics) {
    const Codec c = *DetectJoblibCodec(magic);
    const std::string z = magic + std::string(40, '\xaa');
    const Decompressed d = Decode(z, c);
    EXPECT_NE(d.end, End::kClean) << CodecName(c);
    EXPECT_TRUE(d.bytes.empty()) << CodecName(c);
  }
}

TEST(DecompressTest, OverMaxDecompressedBytesIsANamedLimit) {
  const std::string text = Text(300000);
  Limits limits;
  limits.max_decompressed_bytes = 100000;
  for (Codec c : kAll) {
    const Decompressed d = Decode(Compress(c, text), c, limits);
    EXPECT_EQ(d.end, End::kLimit) << CodecName(c);
    EXPECT_EQ(d.bytes.size(), 100000u) << CodecName(c);
    EXPECT_TRUE(d.bytes == text.substr(0, 100000)) << CodecName(c);
    std::optional<base::LimitHit> hit = base::LimitOf(d.stop);
    ASSERT_TRUE(hit.has_value()) << CodecName(c);
    EXPECT_EQ(hit->name, "max_decompressed_bytes");
    EXPECT_EQ(hit->value, 100000u);
  }
}

TEST(DecompressTest, ExactlyMaxDecompressedBytesIsNoLimit) {
  Limits limits;
  limits.max_decompressed_bytes = 5;
  const Decompressed d = Decode(Compress(Codec::kXz, "12345"), Codec::kXz, limits);
  EXPECT_EQ(d.end, End::kClean) << d.stop;
  EXPECT_EQ(d.bytes, "12345");
}

TEST(DecompressTest, RatioBombIsMaxCompressionRatio) {
  const std::string zeros(64 << 20, '\0');
  for (Codec c : {Codec::kBz2, Codec::kXz}) {
    const Decompressed d = Decode(Compress(c, zeros), c);
    EXPECT_EQ(d.end, End::kLimit) << CodecName(c);
    std::optional<base::LimitHit> hit = base::LimitOf(d.stop);
    ASSERT_TRUE(hit.has_value()) << CodecName(c);
    EXPECT_EQ(hit->name, "max_joblib_compression_ratio");
    EXPECT_LT(d.bytes.size(), zeros.size()) << CodecName(c);
  }
}

TEST(DecompressTest, ZlibNeverReachesTheDefaultRatioLimit) {
  const std::string zeros(16 << 20, '\0');
  const Decompressed d = Decode(Compress(Codec::kZlib, zeros), Codec::kZlib);
  EXPECT_EQ(d.end, End::kClean) << d.stop;
  EXPECT_EQ(d.bytes.size(), zeros.size());
}

TEST(DecompressTest, LzmaDictionaryOverMaxDecoderMemoryIsANamedLimit) {
  // An lzma-alone header declaring a 1 GiB dictionary, unknown size, then garbage.
  std::string z("\x5d\x00\x00\x00\x40\xff\xff\xff\xff\xff\xff\xff\xff", 13);
  z += std::string(64, '\0');
  const Decompressed d = Decode(z, Codec::kLzma);
  EXPECT_EQ(d.end, End::kLimit) << d.stop;
  std::optional<base::LimitHit> hit = base::LimitOf(d.stop);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->name, "max_decoder_memory");
}

TEST(DecompressTest, EmptyInputIsTruncated) {
  for (Codec c : kAll) {
    const Decompressed d = Decode("", c);
    EXPECT_EQ(d.end, End::kTruncated) << CodecName(c);
  }
}

// ---- joblib < 0.10's "ZF" files (read_zfile) ----

// "ZF", hex(len(data)) left-justified to 19 bytes, then zlib.compress(data): write_zfile.
std::string ZFile(std::string_view data, std::string_view between = "") {
  static const char* kHex = "0123456789abcdef";
  std::string digits;
  for (uint64_t n = data.size(); n > 0 || digits.empty(); n >>= 4) {
    digits.insert(0, 1, kHex[n & 15]);
  }
  std::string length = "0x" + digits;
  length.resize(19, ' ');
  return "ZF" + length + std::string(between) + Deflate(data, 15);
}

JoblibCompat Compat(std::string_view file, const Limits& limits = {}) {
  absl::StatusOr<JoblibCompat> z = DecompressJoblibCompat(file, limits);
  EXPECT_TRUE(z.ok()) << z.status();
  return z.ok() ? *std::move(z) : JoblibCompat{};
}

TEST(JoblibCompatTest, ReadsTheStreamAfterTheHeader) {
  const std::string data = Text(5000);
  const std::string file = ZFile(data);  // length_field is a view of it
  const JoblibCompat z = Compat(file);
  EXPECT_EQ(z.stream_offset, kJoblibCompatHeaderBytes);
  EXPECT_EQ(z.length_field, "0x1388             ");
  EXPECT_EQ(z.stream.end, End::kClean);
  EXPECT_EQ(z.stream.bytes, data);
}

TEST(JoblibCompatTest, ASpaceAfterTheHeaderIsSkipped) {
  // joblib <= 0.8.4 under Python 2 wrote the length one byte wider.
  const JoblibCompat z = Compat(ZFile("abc", " "));
  EXPECT_EQ(z.stream_offset, kJoblibCompatHeaderBytes + 1);
  EXPECT_EQ(z.stream.bytes, "abc");
}

TEST(JoblibCompatTest, ALengthThatLiesIsReadAsWritten) {
  std::string file = ZFile(Text(100));
  file[4] = '9';  // "0x64" -> "0x94"
  const JoblibCompat z = Compat(file);
  EXPECT_EQ(z.length_field, "0x94               ");
  EXPECT_EQ(z.stream.bytes.size(), 100u);  // joblib.load fails its assertion (the caller's)
}

TEST(JoblibCompatTest, AStreamThatIsNoZlibIsCorrupt) {
  const JoblibCompat z = Compat("ZF0x10               not a zlib stream");
  EXPECT_EQ(z.length_field, "0x10               ");
  EXPECT_EQ(z.stream.end, End::kCorrupt);
  EXPECT_TRUE(z.stream.bytes.empty());
}

TEST(JoblibCompatTest, AShortFileHasNoStream) {
  const JoblibCompat z = Compat("ZF0x1");
  EXPECT_EQ(z.length_field, "0x1");
  EXPECT_EQ(z.stream.end, End::kTruncated);
}

TEST(JoblibCompatTest, BytesAfterTheStreamAreTrailing) {
  const JoblibCompat z = Compat(ZFile("abc") + "after");
  EXPECT_EQ(z.stream.bytes, "abc");
  EXPECT_EQ(z.stream.trailing_bytes, 5u);
}

TEST(JoblibCompatTest, OverMaxDecompressedBytesIsANamedLimit) {
  Limits small;
  small.max_decompressed_bytes = 1000;
  const JoblibCompat z = Compat(ZFile(std::string(5000, 'a')), small);
  EXPECT_EQ(z.stream.end, End::kLimit);
  std::optional<base::LimitHit> hit = base::LimitOf(z.stream.stop);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->name, "max_decompressed_bytes");
}

}  // namespace
}  // namespace ckptscan::compress
