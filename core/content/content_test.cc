#include "core/content/content.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/limit_status.h"
#include "base/strings.h"
#include "gtest/gtest.h"
#include "zlib.h"

namespace ckptscan::content {
namespace {

using Outcome = Check::Outcome;
using namespace std::string_literals;

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kValid:
      return "kValid";
    case Outcome::kNotClass:
      return "kNotClass";
    case Outcome::kBroken:
      return "kBroken";
  }
  return "?";
}

// `c` has outcome `o` at `offset`.
::testing::AssertionResult Is(const Check& c, Outcome o, uint64_t offset = 0) {
  if (c.outcome == o && c.offset == offset) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << OutcomeName(c.outcome) << " at " << c.offset << " (" << c.status << "), want "
         << OutcomeName(o) << " at " << offset;
}

// `c` is a kBroken limit error naming `limit`.
::testing::AssertionResult IsLimit(const Check& c, std::string_view limit) {
  std::optional<base::LimitHit> hit = base::LimitOf(c.status);
  if (c.outcome == Outcome::kBroken && hit.has_value() && hit->name == limit) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << OutcomeName(c.outcome) << " (" << c.status
                                       << "), want a kBroken limit error " << limit;
}

// ---------------------------------------------------------------------------------------------
// Text

Check Text(std::string_view s, Limits limits = {}) { return CheckText(s, limits); }

TEST(CheckText, OverlongSlashIsNotText) {
  EXPECT_TRUE(Is(Text("a/b\xC0\xAF"), Outcome::kNotClass, 3));
}

TEST(CheckText, OverlongThreeByteFormIsNotText) {
  EXPECT_TRUE(Is(Text("ab\xE0\x80\xAF"), Outcome::kNotClass, 2));
}

TEST(CheckText, OverlongFourByteFormIsNotText) {
  EXPECT_TRUE(Is(Text("\xF0\x8F\xBF\xBF"), Outcome::kNotClass, 0));
}

TEST(CheckText, SurrogateIsNotText) {
  EXPECT_TRUE(Is(Text("x\xED\xA0\x80y"), Outcome::kNotClass, 1));  // U+D800
  EXPECT_TRUE(Is(Text("x\xED\xBF\xBFy"), Outcome::kNotClass, 1));  // U+DFFF
}

TEST(CheckText, CodePointAboveU10FFFFIsNotText) {
  EXPECT_TRUE(Is(Text("\xF4\x90\x80\x80"), Outcome::kNotClass, 0));
  EXPECT_TRUE(Is(Text("\xF5\x80\x80\x80"), Outcome::kNotClass, 0));
}

TEST(CheckText, TruncatedSequenceAtEndIsNotText) {
  EXPECT_TRUE(Is(Text("price: \xE2\x82"), Outcome::kNotClass, 7));
}

TEST(CheckText, StrayContinuationByteIsNotText) {
  EXPECT_TRUE(Is(Text("abcdefghijkl\x80"), Outcome::kNotClass, 12));
}

TEST(CheckText, NulIsNotText) { EXPECT_TRUE(Is(Text("abc\0def"s), Outcome::kNotClass, 3)); }

TEST(CheckText, EscapeIsNotText) {
  EXPECT_TRUE(Is(Text("\x1b[31mred\x1b[0m"), Outcome::kNotClass, 0));
}

TEST(CheckText, DelIsNotText) { EXPECT_TRUE(Is(Text("abc\x7f"), Outcome::kNotClass, 3)); }

TEST(CheckText, BadByteAfterLongAsciiRunIsFoundAtItsOffset) {
  std::string s(1000, 'a');
  s[613] = '\x01';
  EXPECT_TRUE(Is(Text(s), Outcome::kNotClass, 613));
}

TEST(CheckText, EmptyIsNotText) { EXPECT_TRUE(Is(Text(""), Outcome::kNotClass, 0)); }

TEST(CheckText, BomIsAllowed) { EXPECT_TRUE(Text("\xEF\xBB\xBFhello\n").valid()); }

TEST(CheckText, CrlfAndWhitespaceControlsAreAllowed) {
  EXPECT_TRUE(Text("a\tb\r\nc\vd\fe\r\n").valid());
}

TEST(CheckText, MultibyteCodePointsAreAllowed) {
  // é, €, U+1F600, U+10FFFF, U+0085 (a C1 control, which the rule allows)
  EXPECT_TRUE(Text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \xC2\x85").valid());
}

TEST(CheckText, LineOverLimitIsBrokenAtItsStart) {
  Limits limits;
  limits.max_line_bytes = 4;
  EXPECT_TRUE(Text("abcd\nefgh\n", limits).valid());
  const Check c = Text("abcd\nefghi\nj\n", limits);
  EXPECT_TRUE(Is(c, Outcome::kBroken, 5));
  EXPECT_TRUE(IsLimit(c, "max_text_line_bytes"));
}

TEST(CheckText, LastLineWithoutNewlineOverLimitIsBroken) {
  Limits limits;
  limits.max_line_bytes = 4;
  const Check c = Text("ab\ncdefg", limits);
  EXPECT_TRUE(Is(c, Outcome::kBroken, 3));
  EXPECT_TRUE(IsLimit(c, "max_text_line_bytes"));
}

TEST(CheckText, BadByteAfterLongLineIsStillNotText) {
  Limits limits;
  limits.max_line_bytes = 4;
  EXPECT_TRUE(Is(Text("abcdefgh\nxy\0"s, limits), Outcome::kNotClass, 11));
}

TEST(CheckText, FileOverLimitIsBroken) {
  Limits limits;
  limits.max_text_bytes = 10;
  EXPECT_TRUE(Text("0123456789", limits).valid());
  const Check c = Text("0123456789a", limits);
  EXPECT_TRUE(Is(c, Outcome::kBroken, 0));
  EXPECT_TRUE(IsLimit(c, "max_text_bytes"));
}

TEST(CheckText, FileOverLimitCutInsideASequenceIsBroken) {
  Limits limits;
  limits.max_text_bytes = 10;
  EXPECT_TRUE(IsLimit(Text("012345678\xE2\x82\xAC", limits), "max_text_bytes"));
}

TEST(CheckText, BinaryFileOverLimitIsNotText) {
  Limits limits;
  limits.max_text_bytes = 10;
  EXPECT_TRUE(Is(Text("0123\x00"s
                      "56789abcdef",
                      limits),
                 Outcome::kNotClass, 4));
}

// ---------------------------------------------------------------------------------------------
// Images: builders

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Le32(uint32_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
          static_cast<char>(v >> 24)};
}

const std::string kPngSig = "\x89PNG\r\n\x1a\n";

std::string PngChunk(std::string_view type, std::string_view data) {
  std::string typed = std::string(type) + std::string(data);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size());
  return Be32(data.size()) + typed + Be32(static_cast<uint32_t>(crc));
}

std::string Ihdr() {
  // 1x1, 8-bit greyscale, deflate, no filter method, no interlace
  return PngChunk("IHDR", Be32(1) + Be32(1) + "\x08\x00\x00\x00\x00"s);
}

std::string Idat() {
  const std::string raw("\x00\x7f", 2);  // filter type 0, one grey pixel
  uLongf n = compressBound(raw.size());
  std::string out(n, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(out.data()), &n,
                     reinterpret_cast<const Bytef*>(raw.data()), raw.size()),
            Z_OK);
  out.resize(n);
  return PngChunk("IDAT", out);
}

std::string Iend() { return PngChunk("IEND", ""); }

std::string MinimalPng() { return kPngSig + Ihdr() + Idat() + Iend(); }

std::string Segment(uint8_t marker, std::string_view body) {
  const size_t n = body.size() + 2;
  return "\xff"s + static_cast<char>(marker) + static_cast<char>(n >> 8) +
         static_cast<char>(n & 0xff) + std::string(body);
}

const std::string kSoi = "\xff\xd8";
const std::string kEoi = "\xff\xd9";

std::string App0() { return Segment(0xE0, "JFIF\0\x01\x01\x00\x00\x01\x00\x01\x00\x00"s); }
std::string Sof0() {
  return Segment(0xC0, "\x08\x00\x01\x00\x01\x01\x01\x11\x00"s);  // 1x1, one component
}
std::string Sos() { return Segment(0xDA, "\x01\x01\x00\x00\x3f\x00"s); }

// SOI, APP0, SOF0, SOS, entropy-coded data with a stuffed FF, EOI.
std::string MinimalJpeg() { return kSoi + App0() + Sof0() + Sos() + "\x12\xff\x00\x34"s + kEoi; }

std::string GifHeader() {
  // 1x1, a global colour table of 2 entries (flags 0x80: size field 0)
  return "GIF89a\x01\x00\x01\x00\x80\x00\x00"s + "\x00\x00\x00\xff\xff\xff"s;
}
std::string GifControlExtension() { return "\x21\xf9\x04\x00\x00\x00\x00\x00"s; }
std::string GifImage() {
  return "\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00"s  // descriptor, no local table
         "\x02"                                       // LZW minimum code size
         "\x02\x44\x01\x00"s;                         // one sub-block, terminator
}
std::string MinimalGif() { return GifHeader() + GifControlExtension() + GifImage() + "\x3b"; }

std::string WebpChunk(std::string_view fourcc, std::string_view data, bool pad = true) {
  std::string out = std::string(fourcc) + Le32(data.size()) + std::string(data);
  if (pad && data.size() % 2 == 1) out += '\0';
  return out;
}
std::string Riff(std::string_view chunks) {
  return "RIFF" + Le32(chunks.size() + 4) + "WEBP" + std::string(chunks);
}
std::string MinimalWebp() { return Riff(WebpChunk("VP8L", "\x2f\x00\x00\x00\x00"s)); }

Check Img(std::string_view s, Image image, Limits limits = {}) {
  return CheckImage(s, image, limits);
}

// ---------------------------------------------------------------------------------------------
// Images: sniffing and limits

TEST(SniffImage, FindsEachMagic) {
  EXPECT_EQ(SniffImage(MinimalPng()), Image::kPng);
  EXPECT_EQ(SniffImage(MinimalJpeg()), Image::kJpeg);
  EXPECT_EQ(SniffImage(MinimalGif()), Image::kGif);
  EXPECT_EQ(SniffImage("GIF87a"), Image::kGif);
  EXPECT_EQ(SniffImage(MinimalWebp()), Image::kWebp);
}

TEST(SniffImage, OtherBytesAreNoImage) {
  EXPECT_EQ(SniffImage(""), std::nullopt);
  EXPECT_EQ(SniffImage("\x89PNG\r\n"), std::nullopt);
  EXPECT_EQ(SniffImage("\xff\xd8"), std::nullopt);
  EXPECT_EQ(SniffImage("GIF88a"), std::nullopt);
  EXPECT_EQ(SniffImage("RIFF\0\0\0\0WAVE"s), std::nullopt);
  EXPECT_EQ(SniffImage("PK\x03\x04"), std::nullopt);
}

TEST(ImageNames, AreTheFormatNames) {
  EXPECT_EQ(ImageName(Image::kPng), "png");
  EXPECT_EQ(ImageName(Image::kJpeg), "jpeg");
  EXPECT_EQ(ImageName(Image::kGif), "gif");
  EXPECT_EQ(ImageName(Image::kWebp), "webp");
}

TEST(CheckImage, FileOverByteLimitIsBroken) {
  Limits limits;
  limits.max_image_bytes = MinimalPng().size() - 1;
  EXPECT_TRUE(IsLimit(Img(MinimalPng(), Image::kPng, limits), "max_image_bytes"));
}

TEST(CheckImage, MagicOfAnotherFormatIsBroken) {
  EXPECT_TRUE(Is(Img(MinimalGif(), Image::kPng), Outcome::kBroken, 0));
}

// ---------------------------------------------------------------------------------------------
// PNG

TEST(CheckPng, MinimalPngIsValid) { EXPECT_TRUE(Img(MinimalPng(), Image::kPng).valid()); }

TEST(CheckPng, AncillaryChunksAndSeveralIdatsAreValid) {
  const std::string png = kPngSig + Ihdr() + PngChunk("gAMA", Be32(45455)) + Idat() + Idat() +
                          PngChunk("tEXt", "Comment\0hi"s) + Iend();
  EXPECT_TRUE(Img(png, Image::kPng).valid());
}

TEST(CheckPng, BadCrcIsBroken) {
  std::string png = MinimalPng();
  const size_t idat = kPngSig.size() + Ihdr().size();
  png[idat + 8] ^= 1;  // the first data byte of IDAT
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, idat));
}

TEST(CheckPng, MissingIendIsBroken) {
  const std::string png = kPngSig + Ihdr() + Idat();
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, png.size()));
}

TEST(CheckPng, BytesAfterIendAreBroken) {
  const std::string png = MinimalPng() + "PK\x05\x06";
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, MinimalPng().size()));
}

TEST(CheckPng, ChunkLengthPastEndIsBroken) {
  std::string png = kPngSig + Ihdr() + Idat();
  const size_t at = png.size();
  png += Be32(1000) + "IEND" + Be32(0);
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, at));
}

TEST(CheckPng, ChunkLengthOver2Pow31IsBroken) {
  const std::string png = kPngSig + Be32(0x80000000u) + "IHDR" + std::string(16, '\0');
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, 8));
}

TEST(CheckPng, TruncatedChunkHeaderIsBroken) {
  const std::string png = kPngSig + Ihdr() + "\x00\x00";
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, kPngSig.size() + Ihdr().size()));
}

TEST(CheckPng, IhdrNotFirstIsBroken) {
  const std::string png = kPngSig + PngChunk("gAMA", Be32(45455)) + Ihdr() + Idat() + Iend();
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, 8));
}

TEST(CheckPng, IhdrOfWrongLengthIsBroken) {
  const std::string png = kPngSig + PngChunk("IHDR", "short") + Idat() + Iend();
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, 8));
}

TEST(CheckPng, NoIdatIsBroken) {
  const std::string png = kPngSig + Ihdr() + Iend();
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, kPngSig.size() + Ihdr().size()));
}

TEST(CheckPng, IendWithDataIsBroken) {
  const std::string png = kPngSig + Ihdr() + Idat() + PngChunk("IEND", "x");
  EXPECT_TRUE(
      Is(Img(png, Image::kPng), Outcome::kBroken, kPngSig.size() + Ihdr().size() + Idat().size()));
}

TEST(CheckPng, ChunkTypeNotLettersIsBroken) {
  const std::string png = kPngSig + Ihdr() + PngChunk("zi p", "") + Idat() + Iend();
  EXPECT_TRUE(Is(Img(png, Image::kPng), Outcome::kBroken, kPngSig.size() + Ihdr().size()));
}

TEST(CheckPng, ChunkCountOverLimitIsBroken) {
  Limits limits;
  limits.max_image_chunks = 3;
  EXPECT_TRUE(Img(MinimalPng(), Image::kPng, limits).valid());
  const std::string png = kPngSig + Ihdr() + Idat() + Idat() + Iend();
  const Check c = Img(png, Image::kPng, limits);
  EXPECT_TRUE(IsLimit(c, "max_image_chunks"));
  EXPECT_EQ(c.offset, png.size() - Iend().size());
}

// ---------------------------------------------------------------------------------------------
// JPEG

TEST(CheckJpeg, MinimalJpegIsValid) { EXPECT_TRUE(Img(MinimalJpeg(), Image::kJpeg).valid()); }

TEST(CheckJpeg, ProgressiveScansRestartMarkersAndFillBytesAreValid) {
  const std::string jpeg = kSoi + App0() + "\xff\xff"s + Sof0().substr(1) + Sos() +
                           "\x01\xff\x00\x02\xff\xd0\x03\xff\xd1"s + Segment(0xC4, "\x00"s) +
                           Sos() + "\x04\x05\xff\xff\xd7\x06"s + "\xff\xff\xd9"s;
  EXPECT_TRUE(Img(jpeg, Image::kJpeg).valid());
}

TEST(CheckJpeg, NoEoiIsBroken) {
  const std::string jpeg = kSoi + App0() + Sof0() + Sos() + "\x12\x34"s;
  EXPECT_TRUE(Is(Img(jpeg, Image::kJpeg), Outcome::kBroken,
                 kSoi.size() + App0().size() + Sof0().size() + Sos().size()));
}

TEST(CheckJpeg, BytesAfterEoiAreBroken) {
  const std::string jpeg = MinimalJpeg() + "\x80\x04K.";
  EXPECT_TRUE(Is(Img(jpeg, Image::kJpeg), Outcome::kBroken, MinimalJpeg().size()));
}

TEST(CheckJpeg, SegmentLengthPastEndIsBroken) {
  const std::string jpeg = kSoi + "\xff\xe1\x10\x00"s + "Exif";
  EXPECT_TRUE(Is(Img(jpeg, Image::kJpeg), Outcome::kBroken, 2));
}

TEST(CheckJpeg, SegmentLengthUnderTwoIsBroken) {
  const std::string jpeg = kSoi + "\xff\xe0\x00\x01"s + kEoi;
  EXPECT_TRUE(Is(Img(jpeg, Image::kJpeg), Outcome::kBroken, 2));
}

TEST(CheckJpeg, BytesBetweenSegmentsAreBroken) {
  const std::string jpeg = kSoi + App0() + "junk" + Sof0() + Sos() + kEoi;
  EXPECT_TRUE(Is(Img(jpeg, Image::kJpeg), Outcome::kBroken, kSoi.size() + App0().size()));
}

TEST(CheckJpeg, EoiWithoutScanIsBroken) {
  EXPECT_TRUE(Is(Img(kSoi + App0() + kEoi, Image::kJpeg), Outcome::kBroken, 2 + App0().size()));
}

TEST(CheckJpeg, SegmentCountOverLimitIsBroken) {
  Limits limits;
  limits.max_image_chunks = 3;
  EXPECT_TRUE(Img(MinimalJpeg(), Image::kJpeg, limits).valid());
  const std::string jpeg = kSoi + App0() + App0() + Sof0() + Sos() + kEoi;
  const Check c = Img(jpeg, Image::kJpeg, limits);
  EXPECT_TRUE(IsLimit(c, "max_image_chunks"));
  EXPECT_EQ(c.offset, kSoi.size() + 2 * App0().size() + Sof0().size());
}

// ---------------------------------------------------------------------------------------------
// GIF

TEST(CheckGif, MinimalGifIsValid) { EXPECT_TRUE(Img(MinimalGif(), Image::kGif).valid()); }

TEST(CheckGif, Gif87aWithLocalColourTableIsValid) {
  const std::string gif = "GIF87a\x01\x00\x01\x00\x00\x00\x00"s +
                          "\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x81"s + std::string(12, '\x7f') +
                          "\x02\x02\x44\x01\x00\x3b"s;
  EXPECT_TRUE(Img(gif, Image::kGif).valid());
}

TEST(CheckGif, TrailerMissingIsBroken) {
  const std::string gif = GifHeader() + GifImage();
  EXPECT_TRUE(Is(Img(gif, Image::kGif), Outcome::kBroken, gif.size()));
}

TEST(CheckGif, BytesAfterTrailerAreBroken) {
  const std::string gif = MinimalGif() + "cos\nsystem\n";
  EXPECT_TRUE(Is(Img(gif, Image::kGif), Outcome::kBroken, MinimalGif().size()));
}

// Zero padding after the end marker is what real encoders write (a GIF from ajaxload.info ends in
// nine NULs); a nonzero byte after padding is found at its own offset.
TEST(CheckImage, ZeroPaddingAfterTheEndMarkerIsValid) {
  const std::string pad(9, '\0');
  EXPECT_TRUE(Img(MinimalGif() + pad, Image::kGif).valid());
  EXPECT_TRUE(Img(MinimalPng() + pad, Image::kPng).valid());
  EXPECT_TRUE(Img(MinimalJpeg() + pad, Image::kJpeg).valid());
  EXPECT_TRUE(Is(Img(MinimalGif() + pad + "PK", Image::kGif), Outcome::kBroken,
                 MinimalGif().size() + pad.size()));
}

TEST(CheckGif, SubBlockPastEndIsBroken) {
  const std::string gif = GifHeader() + "\x21\xfe\x40hello"s;
  EXPECT_TRUE(Is(Img(gif, Image::kGif), Outcome::kBroken, GifHeader().size() + 2));
}

TEST(CheckGif, UnknownBlockIsBroken) {
  const std::string gif = GifHeader() + "\x99\x3b"s;
  EXPECT_TRUE(Is(Img(gif, Image::kGif), Outcome::kBroken, GifHeader().size()));
}

TEST(CheckGif, GlobalColourTablePastEndIsBroken) {
  const std::string gif = "GIF89a\x01\x00\x01\x00\x87\x00\x00\x3b"s;  // a 768-byte table
  EXPECT_TRUE(Is(Img(gif, Image::kGif), Outcome::kBroken, 13));
}

TEST(CheckGif, BlockCountOverLimitIsBroken) {
  Limits limits;
  limits.max_image_chunks = 2;
  EXPECT_TRUE(Img(MinimalGif(), Image::kGif, limits).valid());
  const std::string gif = GifHeader() + GifControlExtension() + GifImage() + GifImage() + "\x3b";
  const Check c = Img(gif, Image::kGif, limits);
  EXPECT_TRUE(IsLimit(c, "max_image_chunks"));
  EXPECT_EQ(c.offset, GifHeader().size() + GifControlExtension().size() + GifImage().size());
}

// ---------------------------------------------------------------------------------------------
// WebP

TEST(CheckWebp, MinimalWebpIsValid) { EXPECT_TRUE(Img(MinimalWebp(), Image::kWebp).valid()); }

TEST(CheckWebp, ExtendedWebpWithSeveralChunksIsValid) {
  const std::string webp = Riff(WebpChunk("VP8X", std::string(10, '\0')) +
                                WebpChunk("VP8 ", "abc") + WebpChunk("EXIF", "Exif"));
  EXPECT_TRUE(Img(webp, Image::kWebp).valid());
}

TEST(CheckWebp, RiffSizeMismatchIsBroken) {
  const std::string webp = MinimalWebp() + "PK";
  EXPECT_TRUE(Is(Img(webp, Image::kWebp), Outcome::kBroken, 4));
}

TEST(CheckWebp, ChunkPastPayloadIsBroken) {
  std::string chunks = WebpChunk("VP8L", "\x2f\x00\x00\x00\x00"s);
  chunks += "EXIF" + Le32(100) + "abcd";
  EXPECT_TRUE(Is(Img(Riff(chunks), Image::kWebp), Outcome::kBroken, 12 + 14));
}

TEST(CheckWebp, OddChunkWithoutPadIsBroken) {
  const std::string webp = Riff(WebpChunk("VP8L", "\x2f\x00\x00\x00\x00"s, /*pad=*/false));
  EXPECT_TRUE(Is(Img(webp, Image::kWebp), Outcome::kBroken, 12));
}

TEST(CheckWebp, TruncatedChunkHeaderIsBroken) {
  const std::string webp = Riff(WebpChunk("VP8L", "ab") + "EXI");
  EXPECT_TRUE(Is(Img(webp, Image::kWebp), Outcome::kBroken, 12 + 10));
}

TEST(CheckWebp, FirstChunkNotVp8IsBroken) {
  const std::string webp = Riff(WebpChunk("EXIF", "ab") + WebpChunk("VP8L", "ab"));
  EXPECT_TRUE(Is(Img(webp, Image::kWebp), Outcome::kBroken, 12));
}

TEST(CheckWebp, NoChunksIsBroken) {
  EXPECT_TRUE(Is(Img(Riff(""), Image::kWebp), Outcome::kBroken, 12));
}

TEST(CheckWebp, ChunkCountOverLimitIsBroken) {
  Limits limits;
  limits.max_image_chunks = 2;
  const std::string webp = Riff(WebpChunk("VP8X", std::string(10, '\0')) +
                                WebpChunk("VP8 ", "abc") + WebpChunk("EXIF", "Exif"));
  const Check c = Img(webp, Image::kWebp, limits);
  EXPECT_TRUE(IsLimit(c, "max_image_chunks"));
  EXPECT_EQ(c.offset, 12 + 18 + 12);
}

// ---------------------------------------------------------------------------------------------
// Real images

std::optional<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CheckImage, RealImagesUnderUsrShareAreValid) {
  namespace fs = std::filesystem;
  constexpr int kPerFormat = 40;
  int found[4] = {0, 0, 0, 0};
  int total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it("/usr/share", fs::directory_options::skip_permission_denied,
                                      ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    const std::string ext = path.extension().string();
    if (ext != ".png" && ext != ".jpg" && ext != ".jpeg" && ext != ".gif" && ext != ".webp") {
      continue;
    }
    std::error_code ec2;
    if (!it->is_regular_file(ec2) || it->file_size(ec2) > (4u << 20)) continue;
    const std::optional<std::string> data = ReadFile(path);
    if (!data.has_value()) continue;
    const std::optional<Image> image = SniffImage(*data);
    if (!image.has_value()) continue;  // a misnamed file
    int& n = found[static_cast<int>(*image)];
    if (n >= kPerFormat) continue;
    ++n;
    ++total;
    const Check c = CheckImage(*data, *image, Limits{});
    if (!c.valid() &&
        base::StdView(c.status.message()).find(" bytes after ") != std::string_view::npos) {
      // Real encoders do pad after the end marker (ajaxload.info's GIFs end in 9 NULs); the
      // rule rejects any trailing byte, so such a file is broken, not misparsed.
      std::printf("trailing bytes, rejected by the rule: %s: %s\n", path.c_str(),
                  std::string(base::StdView(c.status.message())).c_str());
      continue;
    }
    EXPECT_TRUE(c.valid()) << path << ": " << c.status;
  }
  if (total == 0) GTEST_SKIP() << "no PNG, JPEG, GIF or WebP files under /usr/share";
  std::printf("checked %d png, %d jpeg, %d gif, %d webp files from /usr/share\n", found[0],
              found[1], found[2], found[3]);
}

// ---------------------------------------------------------------------------------------------
// SentencePiece: a hand-encoded ModelProto

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}

std::string Tag(int field, int wire_type) {
  return Varint((static_cast<uint64_t>(field) << 3) | wire_type);
}

std::string Bytes(int field, std::string_view data) {
  return Tag(field, 2) + Varint(data.size()) + std::string(data);
}

std::string Float(int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return Tag(field, 5) + Le32(bits);
}

std::string Piece(std::string_view text, float score, int type) {
  return Bytes(1, Bytes(1, text) + Float(2, score) + Tag(3, 0) + Varint(type));
}

std::string Pieces() {
  return Piece("<unk>", 0, 2) + Piece("\xE2\x96\x81the", -1.5f, 1) + Piece("s", -2.25f, 1);
}

std::string TrainerSpec() {
  // input: "corpus.txt", model_type: UNIGRAM, vocab_size: 3, character_coverage: 0.9995,
  // input_sentence_size (uint64), a nested-looking bytes field
  return Bytes(2, Bytes(1, "corpus.txt") + Tag(3, 0) + Varint(1) + Tag(4, 0) + Varint(3) +
                      Float(10, 0.9995f) + Tag(11, 0) + Varint(1ull << 40) + Tag(52, 1) +
                      std::string(8, '\x01'));
}

std::string NormalizerSpec(int field = 3) {
  return Bytes(field, Bytes(1, "nmt_nfkc") + Bytes(2, "\x00\x01\x02"s) + Tag(3, 0) + Varint(1));
}

std::string Model() { return Pieces() + TrainerSpec() + NormalizerSpec(); }

Check Sp(std::string_view s, Limits limits = {}) { return CheckSentencePiece(s, limits); }

TEST(CheckSentencePiece, ThreePieceModelIsValid) {
  EXPECT_TRUE(Sp(Model()).valid()) << Sp(Model()).status;
}

TEST(CheckSentencePiece, AllFiveTopLevelFieldsAreValid) {
  const std::string model = Pieces() + TrainerSpec() + NormalizerSpec() +
                            Bytes(4, Bytes(1, Bytes(1, "in") + Bytes(2, "out"))) +
                            NormalizerSpec(5) + Piece("x", 0, 1);
  EXPECT_TRUE(Sp(model).valid()) << Sp(model).status;
}

TEST(CheckSentencePiece, FirstByteNotPiecesTagIsNotClass) {
  EXPECT_TRUE(Is(Sp(TrainerSpec() + Pieces()), Outcome::kNotClass, 0));
  EXPECT_TRUE(Is(Sp(""), Outcome::kNotClass, 0));
}

TEST(CheckSentencePiece, FirstPieceThatDoesNotParseIsNotClass) {
  // A text file that starts with a newline: "hello" would be a length of 104.
  EXPECT_TRUE(Is(Sp("\nhello world\n"), Outcome::kNotClass, 0));
  // A complete first field whose contents are no piece.
  EXPECT_TRUE(Is(Sp("\n\x03\x7f\x7f\x7f"s + Pieces()), Outcome::kNotClass, 2));
}

TEST(CheckSentencePiece, GroupWireTypeIsBroken) {
  const std::string model = Pieces() + Tag(2, 3) + Tag(2, 4);
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size()));
}

TEST(CheckSentencePiece, GroupInsideSubmessageIsBroken) {
  const std::string model = Pieces() + Bytes(2, Tag(1, 3) + Tag(1, 4));
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size() + 2));
}

TEST(CheckSentencePiece, UnknownTopLevelField7IsBroken) {
  const std::string model = Pieces() + Bytes(7, "x");
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size()));
}

TEST(CheckSentencePiece, FieldNumberZeroIsBroken) {
  const std::string model = Pieces() + Bytes(2, Tag(0, 0) + Varint(1));
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size() + 2));
}

TEST(CheckSentencePiece, KnownFieldWithWrongWireTypeIsBroken) {
  const std::string model = Pieces() + Tag(3, 0) + Varint(1);
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size()));
}

TEST(CheckSentencePiece, ScoreWithWrongWireTypeIsBroken) {
  const std::string bad = Bytes(1, Bytes(1, "a") + Tag(2, 1) + std::string(8, '\0'));
  EXPECT_TRUE(Is(Sp(Pieces() + bad), Outcome::kBroken, Pieces().size() + 5));
}

TEST(CheckSentencePiece, UnknownPieceFieldIsBroken) {
  const std::string bad = Bytes(1, Bytes(1, "a") + Tag(4, 0) + Varint(1));
  EXPECT_TRUE(Is(Sp(Pieces() + bad), Outcome::kBroken, Pieces().size() + 5));
}

TEST(CheckSentencePiece, PieceWithInvalidUtf8IsBroken) {
  const std::string model = Pieces() + Piece("ab\xC0\xAF", 0, 1);
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size() + 6));
}

TEST(CheckSentencePiece, TruncatedLengthIsBroken) {
  const std::string model = Pieces() + Tag(2, 2) + "\xff";
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size()));
}

TEST(CheckSentencePiece, LengthPastEndIsBroken) {
  const std::string model = Pieces() + Tag(2, 2) + Varint(100) + "abc";
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size()));
}

TEST(CheckSentencePiece, LengthPastSubmessageIsBroken) {
  // trainer_spec of 3 bytes holding a string field that claims 5
  const std::string model = Pieces() + Tag(2, 2) + Varint(3) + Tag(1, 2) + Varint(5) + "abcde";
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size() + 2));
}

TEST(CheckSentencePiece, VarintLongerThanTenBytesIsBroken) {
  const std::string model = Pieces() + Bytes(2, Tag(3, 0) + std::string(10, '\xff') + "\x01");
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Pieces().size() + 2));
}

TEST(CheckSentencePiece, TrailingGarbageByteIsBroken) {
  const std::string model = Model() + "\x80";
  EXPECT_TRUE(Is(Sp(model), Outcome::kBroken, Model().size()));
}

TEST(CheckSentencePiece, PieceCountOverLimitIsBroken) {
  Limits limits;
  limits.max_sentencepiece_pieces = 2;
  const Check c = Sp(Model(), limits);
  EXPECT_TRUE(IsLimit(c, "max_sentencepiece_pieces"));
  EXPECT_EQ(c.offset, Piece("<unk>", 0, 2).size() + Piece("\xE2\x96\x81the", -1.5f, 1).size());
}

TEST(CheckSentencePiece, FileOverByteLimitIsBroken) {
  Limits limits;
  limits.max_sentencepiece_bytes = Model().size() - 1;
  EXPECT_TRUE(IsLimit(Sp(Model(), limits), "max_sentencepiece_bytes"));
}

TEST(CheckSentencePiece, RealTokenizerModelIsValid) {
  std::vector<std::string> paths = {CKPT_SOURCE_DIR "/tests/fixtures/repo/model/tokenizer.model"};
  int checked = 0;
  for (const std::string& path : paths) {
    const std::optional<std::string> data = ReadFile(path);
    if (!data.has_value()) continue;
    ++checked;
    const Check c = Sp(*data);
    EXPECT_TRUE(c.valid()) << path << ": " << c.status << " at " << c.offset;
  }
  if (checked == 0) GTEST_SKIP() << "no tokenizer.model on this machine";
}

}  // namespace
}  // namespace ckptscan::content
