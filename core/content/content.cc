#include "core/content/content.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "zlib.h"

namespace ckptscan::content {
namespace {

using Outcome = Check::Outcome;

Check Valid() {
  Check c;
  c.outcome = Outcome::kValid;
  return c;
}

Check Result(Outcome outcome, absl::Status status, uint64_t offset) {
  Check c;
  c.outcome = outcome;
  c.status = std::move(status);
  c.offset = offset;
  return c;
}

const uint8_t* Bytes(std::string_view data) {
  return reinterpret_cast<const uint8_t*>(data.data());
}

// ---------------------------------------------------------------------------------------------
// UTF-8

// The length (2 to 4) of the well-formed UTF-8 sequence at p[0], a byte >= 0x80, of the
// `avail` bytes at p; 0 when it is ill-formed (a stray continuation byte, an overlong form, a
// surrogate, a code point past U+10FFFF); -1 when the bytes end inside a sequence that is
// well-formed so far. The ranges are the Unicode standard's table 3-7.
int Utf8Sequence(const uint8_t* p, uint64_t avail) {
  const uint8_t b = p[0];
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b == 0xE0) {
    len = 3, lo = 0xA0;  // E0 80..9F would be overlong
  } else if (b == 0xED) {
    len = 3, hi = 0x9F;  // ED A0..BF would be a surrogate
  } else if (b >= 0xE1 && b <= 0xEF) {
    len = 3;
  } else if (b == 0xF0) {
    len = 4, lo = 0x90;  // F0 80..8F would be overlong
  } else if (b >= 0xF1 && b <= 0xF3) {
    len = 4;
  } else if (b == 0xF4) {
    len = 4, hi = 0x8F;  // F4 90.. would be past U+10FFFF
  } else {
    return 0;  // 80..C1 (continuation bytes, overlong 2-byte leads), F5..FF
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<uint64_t>(i) >= avail) return -1;
    if (p[i] < lo || p[i] > hi) return 0;
    lo = 0x80, hi = 0xBF;
  }
  return len;
}

// The offset in `s` of its first ill-formed UTF-8 sequence (any code point is well-formed,
// controls included); nullopt when there is none.
std::optional<uint64_t> FirstIllFormedUtf8(std::string_view s) {
  const uint8_t* p = Bytes(s);
  const uint64_t n = s.size();
  uint64_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = Utf8Sequence(p + i, n - i);
    if (len <= 0) return i;
    i += len;
  }
  return std::nullopt;
}

constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// True when none of the 8 bytes in `x` is a control character, DEL or a byte >= 0x80 (and
// so none is '\n' either): printable ASCII, nothing to look at.
bool PrintableAscii8(uint64_t x) {
  if (x & kHighs) return false;
  if ((x - 0x20 * kOnes) & ~x & kHighs) return false;  // a byte < 0x20
  const uint64_t del = x ^ (0x7F * kOnes);
  return ((del - kOnes) & ~del & kHighs) == 0;  // no byte == 0x7f
}

// ---------------------------------------------------------------------------------------------
// Images

constexpr std::string_view kPngSignature = "\x89PNG\r\n\x1a\n";

uint32_t BigEndian32(std::string_view b) {
  const uint8_t* p = Bytes(b);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

uint32_t LittleEndian32(std::string_view b) {
  const uint8_t* p = Bytes(b);
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}

std::string Printable(std::string_view fourcc) {
  std::string out;
  for (char c : fourcc) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += absl::StrFormat("\\x%02x", static_cast<uint8_t>(c));
    }
  }
  return out;
}

// One image validation: a bounded reader over the whole file, the chunk budget, and the offset
// of the item at fault when the run fails.
class ImageParser {
 public:
  ImageParser(std::string_view data, const Limits& limits)
      : data_(data), r_(data), limits_(limits) {}

  // The offset the failure of the last run refers to.
  uint64_t at() const { return at_; }

  absl::Status Png();
  absl::Status Jpeg();
  absl::Status Gif();
  absl::Status Webp();

 private:
  // InvalidArgument with `what` and the offset, which becomes the check's offset.
  absl::Status Bad(uint64_t offset, std::string_view what) {
    at_ = offset;
    return absl::InvalidArgumentError(
        absl::StrFormat("%s at byte offset %d", base::AbslView(what), offset));
  }
  // Counts one chunk, segment or block (starting at `offset`) against max_image_chunks.
  absl::Status Count(uint64_t offset, std::string_view what) {
    if (++chunks_ > limits_.max_image_chunks) {
      at_ = offset;
      return base::LimitError(
          absl::StrFormat("more than %d %s (max_image_chunks), at byte offset %d",
                          limits_.max_image_chunks, base::AbslView(what), offset),
          "max_image_chunks", limits_.max_image_chunks);
    }
    return absl::OkStatus();
  }
  // After the end marker (`what`): only zero bytes, the padding some encoders write (real GIFs
  // end in NULs). Anything else could be a second file riding on the image.
  absl::Status OnlyPaddingAfter(std::string_view what) {
    const std::string_view rest = data_.substr(r_.offset());
    const size_t bad = rest.find_first_not_of('\0');
    if (bad == std::string_view::npos) return absl::OkStatus();
    return Bad(r_.offset() + bad, absl::StrFormat("%d bytes after %s, not all zero padding",
                                                  rest.size(), base::AbslView(what)));
  }
  // Data sub-blocks of a GIF (a length byte, that many bytes; a 0 length ends them).
  absl::Status GifSubBlocks();
  // The entropy-coded data after a JPEG SOS header, up to (not including) the next marker.
  absl::Status JpegScan();

  std::string_view data_;
  base::ByteReader r_;
  const Limits& limits_;
  uint64_t chunks_ = 0;
  uint64_t at_ = 0;
};

// PNG (ISO/IEC 15948): the signature, then chunks of length (big-endian, at most 2^31-1),
// type (four ASCII letters), data and a CRC-32 of type and data. IHDR first (13 bytes), at
// least one IDAT, IEND (empty) last, and nothing but zero padding after it.
absl::Status ImageParser::Png() {
  if (r_.remaining() < kPngSignature.size() || data_.substr(0, 8) != kPngSignature) {
    return Bad(0, "no PNG signature");
  }
  CKPT_RETURN_IF_ERROR(r_.Skip(kPngSignature.size()));
  bool idat = false;
  while (!r_.empty()) {
    const uint64_t start = r_.offset();
    at_ = start;
    if (r_.remaining() < 12) return Bad(start, "truncated chunk header");
    CKPT_ASSIGN_OR_RETURN(std::string_view head, r_.ReadBytes(8));
    const uint32_t length = BigEndian32(head.substr(0, 4));
    const std::string_view type = head.substr(4, 4);
    if (length > 0x7fffffffu) {
      return Bad(start, absl::StrFormat("chunk length %d is over 2^31-1", length));
    }
    for (char c : type) {
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) {
        return Bad(start,
                   absl::StrFormat("chunk type \"%s\" is not four ASCII letters", Printable(type)));
      }
    }
    if (length > r_.remaining() - 4) {
      return Bad(start, absl::StrFormat("chunk %s of %d bytes runs past the end of the file",
                                        base::AbslView(type), length));
    }
    CKPT_RETURN_IF_ERROR(Count(start, "chunks"));
    CKPT_ASSIGN_OR_RETURN(std::string_view body, r_.ReadBytes(length));
    CKPT_ASSIGN_OR_RETURN(std::string_view crc_bytes, r_.ReadBytes(4));
    const uint32_t stored = BigEndian32(crc_bytes);
    uLong crc = crc32_z(0, Bytes(type), type.size());
    crc = crc32_z(crc, Bytes(body), body.size());
    if (crc != stored) {
      return Bad(start, absl::StrFormat("chunk %s: CRC-32 0x%08x, the data's is 0x%08x",
                                        base::AbslView(type), stored, crc));
    }
    const bool first = start == kPngSignature.size();
    if (first != (type == "IHDR")) {
      return Bad(start, first ? "the first chunk is not IHDR" : "a second IHDR chunk");
    }
    if (type == "IHDR" && length != 13) {
      return Bad(start, absl::StrFormat("IHDR of %d bytes (not 13)", length));
    }
    if (type == "IDAT") idat = true;
    if (type == "IEND") {
      if (length != 0) return Bad(start, absl::StrFormat("IEND of %d bytes (not 0)", length));
      if (!idat) return Bad(start, "no IDAT chunk before IEND");
      return OnlyPaddingAfter("IEND");
    }
  }
  return Bad(r_.offset(), "no IEND chunk (the file ends)");
}

// JPEG (ITU T.81 with JFIF/Exif segments): SOI, then marker segments (FF, optional fill FFs,
// the marker; a two-byte big-endian length that counts itself, except for RSTn and TEM); after
// each SOS header the entropy-coded data (FF 00 a stuffed byte, FF D0..D7 restart markers) up
// to the next marker; EOI the last two bytes of the file.
absl::Status ImageParser::Jpeg() {
  if (r_.remaining() < 2 || data_.substr(0, 2) != "\xff\xd8") return Bad(0, "no SOI marker");
  CKPT_RETURN_IF_ERROR(r_.Skip(2));
  bool scan = false;
  while (true) {
    const uint64_t start = r_.offset();
    at_ = start;
    if (r_.empty()) return Bad(start, "no EOI marker (the file ends)");
    CKPT_ASSIGN_OR_RETURN(uint8_t ff, r_.ReadU8());
    if (ff != 0xFF) return Bad(start, absl::StrFormat("byte 0x%02x where a marker belongs", ff));
    uint8_t marker = 0xFF;
    while (marker == 0xFF) {  // fill bytes
      if (r_.empty()) return Bad(start, "no EOI marker (the file ends in fill bytes)");
      CKPT_ASSIGN_OR_RETURN(marker, r_.ReadU8());
    }
    const uint64_t marker_at = r_.offset() - 2;
    if (marker == 0xD9) {  // EOI
      if (!scan) return Bad(marker_at, "EOI before any SOS (no image data)");
      return OnlyPaddingAfter("EOI");
    }
    if (marker == 0x00) return Bad(marker_at, "FF 00 outside entropy-coded data");
    if (marker == 0xD8) return Bad(marker_at, "a second SOI marker");
    CKPT_RETURN_IF_ERROR(Count(marker_at, "segments"));
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) continue;  // no length
    if (r_.remaining() < 2) return Bad(marker_at, "truncated segment length");
    CKPT_ASSIGN_OR_RETURN(std::string_view len_bytes, r_.ReadBytes(2));
    const uint16_t length = static_cast<uint16_t>((Bytes(len_bytes)[0] << 8) | Bytes(len_bytes)[1]);
    if (length < 2) {
      return Bad(marker_at,
                 absl::StrFormat("segment FF %02X of length %d (under 2)", marker, length));
    }
    if (length - 2u > r_.remaining()) {
      return Bad(marker_at,
                 absl::StrFormat("segment FF %02X of length %d runs past the end of the file",
                                 marker, length));
    }
    CKPT_RETURN_IF_ERROR(r_.Skip(length - 2u));
    if (marker == 0xDA) {  // SOS
      scan = true;
      CKPT_RETURN_IF_ERROR(JpegScan());
    }
  }
}

absl::Status ImageParser::JpegScan() {
  const uint64_t start = r_.offset();
  while (true) {
    const std::string_view rest = r_.Peek();
    const void* ff = std::memchr(rest.data(), 0xFF, rest.size());
    if (ff == nullptr) return Bad(start, "entropy-coded data runs to the end (no EOI marker)");
    const uint64_t skip = static_cast<const char*>(ff) - rest.data();
    if (skip + 1 >= rest.size()) {
      return Bad(r_.offset() + skip, "the file ends in entropy-coded data (no EOI marker)");
    }
    const uint8_t next = static_cast<uint8_t>(rest[skip + 1]);
    if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {  // a stuffed byte, a restart marker
      CKPT_RETURN_IF_ERROR(r_.Skip(skip + 2));
    } else if (next == 0xFF) {  // a fill byte before a marker
      CKPT_RETURN_IF_ERROR(r_.Skip(skip + 1));
    } else {  // the marker that ends the scan: the caller reads it
      return r_.Skip(skip);
    }
  }
}

// GIF (87a, 89a): header, logical screen descriptor, the global colour table when flagged;
// then extension blocks (21, label, sub-blocks) and images (2C, descriptor, the local colour
// table when flagged, the LZW minimum code size, sub-blocks); the trailer 3B the last byte.
absl::Status ImageParser::Gif() {
  if (r_.remaining() < 13 || (data_.substr(0, 6) != "GIF87a" && data_.substr(0, 6) != "GIF89a")) {
    return Bad(0, "no GIF header and logical screen descriptor");
  }
  CKPT_RETURN_IF_ERROR(r_.Skip(10));
  CKPT_ASSIGN_OR_RETURN(uint8_t flags, r_.ReadU8());
  CKPT_RETURN_IF_ERROR(r_.Skip(2));
  if (flags & 0x80) {
    const uint64_t table = 3ull << ((flags & 7) + 1);
    if (table > r_.remaining()) return Bad(13, "global colour table runs past the end");
    CKPT_RETURN_IF_ERROR(r_.Skip(table));
  }
  while (true) {
    const uint64_t start = r_.offset();
    at_ = start;
    if (r_.empty()) return Bad(start, "no trailer (the file ends)");
    CKPT_ASSIGN_OR_RETURN(uint8_t kind, r_.ReadU8());
    if (kind == 0x3B) {
      return OnlyPaddingAfter("the trailer");
    }
    CKPT_RETURN_IF_ERROR(Count(start, "blocks"));
    if (kind == 0x21) {
      if (r_.empty()) return Bad(start, "truncated extension block");
      CKPT_RETURN_IF_ERROR(r_.Skip(1));  // the label
      CKPT_RETURN_IF_ERROR(GifSubBlocks());
    } else if (kind == 0x2C) {
      if (r_.remaining() < 10) return Bad(start, "truncated image descriptor");
      CKPT_RETURN_IF_ERROR(r_.Skip(8));  // left, top, width, height
      CKPT_ASSIGN_OR_RETURN(uint8_t image_flags, r_.ReadU8());
      if (image_flags & 0x80) {
        const uint64_t table = 3ull << ((image_flags & 7) + 1);
        if (table > r_.remaining()) return Bad(start, "local colour table runs past the end");
        CKPT_RETURN_IF_ERROR(r_.Skip(table));
      }
      if (r_.empty()) return Bad(start, "no LZW minimum code size");
      CKPT_RETURN_IF_ERROR(r_.Skip(1));
      CKPT_RETURN_IF_ERROR(GifSubBlocks());
    } else {
      return Bad(start, absl::StrFormat("unknown block type 0x%02x", kind));
    }
  }
}

absl::Status ImageParser::GifSubBlocks() {
  while (true) {
    const uint64_t start = r_.offset();
    if (r_.empty()) return Bad(start, "data sub-blocks run to the end (no terminator)");
    CKPT_ASSIGN_OR_RETURN(uint8_t length, r_.ReadU8());
    if (length == 0) return absl::OkStatus();
    if (length > r_.remaining()) {
      return Bad(start, absl::StrFormat("data sub-block of %d bytes runs past the end", length));
    }
    CKPT_RETURN_IF_ERROR(r_.Skip(length));
  }
}

// WebP: a RIFF file ("RIFF", little-endian size, "WEBP") whose size is the file's less 8, and
// whose payload is exactly a run of chunks (FourCC, little-endian size, data, a pad byte after
// odd-sized data), the first "VP8 ", "VP8L" or "VP8X".
absl::Status ImageParser::Webp() {
  if (r_.remaining() < 12 || data_.substr(0, 4) != "RIFF" || data_.substr(8, 4) != "WEBP") {
    return Bad(0, "no RIFF WEBP header");
  }
  const uint32_t riff_size = LittleEndian32(data_.substr(4, 4));
  if (riff_size != data_.size() - 8) {
    return Bad(4, absl::StrFormat("RIFF size %d, the file holds %d bytes after the size field",
                                  riff_size, data_.size() - 8));
  }
  CKPT_RETURN_IF_ERROR(r_.Skip(12));
  if (r_.empty()) return Bad(12, "no chunks");
  while (!r_.empty()) {
    const uint64_t start = r_.offset();
    at_ = start;
    if (r_.remaining() < 8) return Bad(start, "truncated chunk header");
    CKPT_ASSIGN_OR_RETURN(std::string_view fourcc, r_.ReadBytes(4));
    CKPT_ASSIGN_OR_RETURN(uint32_t size, r_.ReadU32LE());
    if (start == 12 && fourcc != "VP8 " && fourcc != "VP8L" && fourcc != "VP8X") {
      return Bad(start,
                 absl::StrFormat("first chunk \"%s\" (not VP8, VP8L or VP8X)", Printable(fourcc)));
    }
    if (size > r_.remaining()) {
      return Bad(start, absl::StrFormat("chunk \"%s\" of %d bytes runs past the RIFF payload",
                                        Printable(fourcc), size));
    }
    const uint64_t padded = uint64_t{size} + (size & 1);
    if (padded > r_.remaining()) {
      return Bad(start, absl::StrFormat("chunk \"%s\" of odd size %d has no pad byte",
                                        Printable(fourcc), size));
    }
    CKPT_RETURN_IF_ERROR(Count(start, "chunks"));
    CKPT_RETURN_IF_ERROR(r_.Skip(padded));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// SentencePiece

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Field numbers of sentencepiece's ModelProto and SentencePiece (sentencepiece_model.proto).
constexpr int kPiecesFieldNumber = 1;            // repeated SentencePiece
constexpr int kTrainerSpecFieldNumber = 2;       // TrainerSpec
constexpr int kNormalizerSpecFieldNumber = 3;    // NormalizerSpec
constexpr int kSelfTestDataFieldNumber = 4;      // SelfTestData
constexpr int kDenormalizerSpecFieldNumber = 5;  // NormalizerSpec
constexpr int kPieceFieldNumber = 1;             // SentencePiece.piece: string
constexpr int kScoreFieldNumber = 2;             // SentencePiece.score: float
constexpr int kTypeFieldNumber = 3;              // SentencePiece.type: enum

std::string_view ModelFieldName(int field) {
  switch (field) {
    case kTrainerSpecFieldNumber:
      return "trainer_spec";
    case kNormalizerSpecFieldNumber:
      return "normalizer_spec";
    case kSelfTestDataFieldNumber:
      return "self_test_data";
    case kDenormalizerSpecFieldNumber:
      return "denormalizer_spec";
    default:
      return "pieces";
  }
}

// Reads a ModelProto with CodedInputStream, no recursion: the top-level fields, each piece's
// fields, and the other submessages' fields one level deep (their nested messages are skipped
// as bytes).
class SentencePieceParser {
 public:
  SentencePieceParser(std::string_view data, const Limits& limits)
      : data_(data), in_(Bytes(data), static_cast<int>(data.size())), limits_(limits) {}

  // Reads one top-level field; the end of the data is not checked.
  absl::Status Field();
  bool AtEnd() const { return Position() == data_.size(); }
  uint64_t Position() const { return static_cast<uint64_t>(in_.CurrentPosition()); }
  uint64_t pieces() const { return pieces_; }
  uint64_t at() const { return at_; }

 private:
  absl::Status Bad(uint64_t offset, std::string_view what) {
    at_ = offset;
    return absl::InvalidArgumentError(
        absl::StrFormat("%s at byte offset %d", base::AbslView(what), offset));
  }
  // The tag at the current position, before `end`: field number and wire type checked to be
  // well-formed (no groups, no field 0).
  absl::StatusOr<uint32_t> Tag(uint64_t end);
  // The length of a length-delimited field, which must fit before `end`.
  absl::StatusOr<uint32_t> Length(uint64_t end, uint64_t tag_at, std::string_view what);
  // Skips the value of the field `tag` starts (a varint, fixed64 or fixed32; a length-delimited
  // value as bytes, without reading into it), which must end before `end`.
  absl::Status SkipValue(uint32_t tag, uint64_t end, uint64_t tag_at);
  absl::Status Piece(uint64_t end);
  absl::Status Submessage(uint64_t end, std::string_view name);

  std::string_view data_;
  CodedInputStream in_;
  const Limits& limits_;
  uint64_t pieces_ = 0;
  uint64_t at_ = 0;
};

absl::StatusOr<uint32_t> SentencePieceParser::Tag(uint64_t end) {
  const uint64_t tag_at = Position();
  const uint32_t tag = in_.ReadTagNoLastTag();
  if (tag == 0 || Position() > end) return Bad(tag_at, "malformed or truncated tag");
  if (WireFormatLite::GetTagFieldNumber(tag) == 0) return Bad(tag_at, "field number 0");
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT:
    case WireFormatLite::WIRETYPE_FIXED64:
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
    case WireFormatLite::WIRETYPE_FIXED32:
      return tag;
    case WireFormatLite::WIRETYPE_START_GROUP:
    case WireFormatLite::WIRETYPE_END_GROUP:
      return Bad(tag_at, absl::StrFormat("a group (field %d, wire type %d)",
                                         WireFormatLite::GetTagFieldNumber(tag), tag & 7));
    default:
      return Bad(tag_at, absl::StrFormat("invalid wire type %d (field %d)", tag & 7,
                                         WireFormatLite::GetTagFieldNumber(tag)));
  }
}

absl::StatusOr<uint32_t> SentencePieceParser::Length(uint64_t end, uint64_t tag_at,
                                                     std::string_view what) {
  uint64_t length = 0;
  if (!in_.ReadVarint64(&length)) {
    return Bad(tag_at, absl::StrFormat("%s: malformed or truncated length", base::AbslView(what)));
  }
  const uint64_t pos = Position();
  if (pos > end || length > end - pos) {
    return Bad(tag_at, absl::StrFormat("%s: length %d runs past the end of its message",
                                       base::AbslView(what), length));
  }
  return static_cast<uint32_t>(length);  // at most end - pos, which is under 2^31
}

absl::Status SentencePieceParser::SkipValue(uint32_t tag, uint64_t end, uint64_t tag_at) {
  const int field = WireFormatLite::GetTagFieldNumber(tag);
  bool ok = true;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT: {
      uint64_t v;
      ok = in_.ReadVarint64(&v);
      break;
    }
    case WireFormatLite::WIRETYPE_FIXED64: {
      uint64_t v;
      ok = in_.ReadLittleEndian64(&v);
      break;
    }
    case WireFormatLite::WIRETYPE_FIXED32: {
      uint32_t v;
      ok = in_.ReadLittleEndian32(&v);
      break;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      CKPT_ASSIGN_OR_RETURN(uint32_t length,
                            Length(end, tag_at, absl::StrFormat("field %d", field)));
      ok = in_.Skip(static_cast<int>(length));
      break;
    }
    default:
      return Bad(tag_at, absl::StrFormat("field %d: wire type %d", field, tag & 7));
  }
  if (!ok || Position() > end) {
    return Bad(tag_at, absl::StrFormat("field %d: malformed or truncated value", field));
  }
  return absl::OkStatus();
}

absl::Status SentencePieceParser::Piece(uint64_t end) {
  while (Position() < end) {
    const uint64_t tag_at = Position();
    CKPT_ASSIGN_OR_RETURN(uint32_t tag, Tag(end));
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const WireFormatLite::WireType type = WireFormatLite::GetTagWireType(tag);
    if (field == kPieceFieldNumber) {
      if (type != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        return Bad(tag_at, absl::StrFormat("piece: wire type %d (not a string)", type));
      }
      CKPT_ASSIGN_OR_RETURN(uint32_t length, Length(end, tag_at, "piece"));
      const uint64_t text_at = Position();
      if (const std::optional<uint64_t> bad = FirstIllFormedUtf8(data_.substr(text_at, length))) {
        return Bad(text_at + *bad, "piece: ill-formed UTF-8");
      }
      if (!in_.Skip(static_cast<int>(length))) return Bad(tag_at, "piece: truncated");
    } else if (field == kScoreFieldNumber) {
      if (type != WireFormatLite::WIRETYPE_FIXED32) {
        return Bad(tag_at, absl::StrFormat("score: wire type %d (not a float)", type));
      }
      CKPT_RETURN_IF_ERROR(SkipValue(tag, end, tag_at));
    } else if (field == kTypeFieldNumber) {
      if (type != WireFormatLite::WIRETYPE_VARINT) {
        return Bad(tag_at, absl::StrFormat("type: wire type %d (not an enum)", type));
      }
      CKPT_RETURN_IF_ERROR(SkipValue(tag, end, tag_at));
    } else {
      return Bad(tag_at, absl::StrFormat("piece: unknown field %d", field));
    }
  }
  return absl::OkStatus();
}

absl::Status SentencePieceParser::Submessage(uint64_t end, std::string_view name) {
  while (Position() < end) {
    const uint64_t tag_at = Position();
    CKPT_ASSIGN_OR_RETURN(uint32_t tag, Tag(end));
    if (absl::Status s = SkipValue(tag, end, tag_at); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s", base::AbslView(name), s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status SentencePieceParser::Field() {
  const uint64_t end = data_.size();
  const uint64_t tag_at = Position();
  CKPT_ASSIGN_OR_RETURN(uint32_t tag, Tag(end));
  const int field = WireFormatLite::GetTagFieldNumber(tag);
  if (field < kPiecesFieldNumber || field > kDenormalizerSpecFieldNumber) {
    return Bad(tag_at, absl::StrFormat("unknown ModelProto field %d", field));
  }
  const std::string_view name = ModelFieldName(field);
  if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
    return Bad(tag_at,
               absl::StrFormat("%s: wire type %d (not a message)", base::AbslView(name), tag & 7));
  }
  if (field == kPiecesFieldNumber && ++pieces_ > limits_.max_sentencepiece_pieces) {
    at_ = tag_at;
    return base::LimitError(
        absl::StrFormat("more than %d pieces (max_sentencepiece_pieces), at byte offset %d",
                        limits_.max_sentencepiece_pieces, tag_at),
        "max_sentencepiece_pieces", limits_.max_sentencepiece_pieces);
  }
  CKPT_ASSIGN_OR_RETURN(uint32_t length, Length(end, tag_at, name));
  const uint64_t sub_end = Position() + length;
  const CodedInputStream::Limit limit = in_.PushLimit(static_cast<int>(length));
  absl::Status s = field == kPiecesFieldNumber ? Piece(sub_end) : Submessage(sub_end, name);
  in_.PopLimit(limit);
  return s;
}

}  // namespace

Check CheckText(std::string_view data, const Limits& limits) {
  if (data.empty()) return Result(Outcome::kNotClass, absl::InvalidArgumentError("empty"), 0);
  // Over max_text_bytes, only the first max_text_bytes are read: a byte there that is no text
  // still makes the file no text (kNotClass), and text that long is a limit (kBroken).
  const uint64_t size = data.size();
  const bool over = size > limits.max_text_bytes;
  const uint64_t end = over ? limits.max_text_bytes : size;
  const uint8_t* p = Bytes(data);
  uint64_t i = 0;
  uint64_t line_start = 0;
  bool long_line = false;  // the first line over max_line_bytes starts at long_line_at
  uint64_t long_line_at = 0;
  while (i < end) {
    while (end - i >= 8) {
      uint64_t x;
      std::memcpy(&x, p + i, 8);
      if (!PrintableAscii8(x)) break;
      i += 8;
    }
    if (i >= end) break;
    const uint8_t b = p[i];
    if (b >= 0x80) {
      const int len = Utf8Sequence(p + i, end - i);
      if (len < 0 && over) break;  // the sequence goes on past the bytes read
      if (len <= 0) {
        return Result(Outcome::kNotClass,
                      absl::InvalidArgumentError(absl::StrFormat(
                          "ill-formed UTF-8 sequence at byte offset %d (byte 0x%02x)", i, b)),
                      i);
      }
      i += len;
      continue;
    }
    if (b == '\n') {
      if (!long_line && i - line_start > limits.max_line_bytes) {
        long_line = true;
        long_line_at = line_start;
      }
      line_start = i + 1;
    } else if ((b < 0x20 && !(b >= '\t' && b <= '\r')) || b == 0x7f) {
      return Result(Outcome::kNotClass,
                    absl::InvalidArgumentError(
                        absl::StrFormat("control character 0x%02x at byte offset %d", b, i)),
                    i);
    }
    ++i;
  }
  if (over) {
    return Result(Outcome::kBroken,
                  base::LimitError(absl::StrFormat("text of %d bytes is over %d (max_text_bytes)",
                                                   size, limits.max_text_bytes),
                                   "max_text_bytes", limits.max_text_bytes),
                  0);
  }
  if (!long_line && size - line_start > limits.max_line_bytes) {
    long_line = true;
    long_line_at = line_start;
  }
  if (long_line) {
    return Result(Outcome::kBroken,
                  base::LimitError(absl::StrFormat("the line at byte offset %d is over %d bytes "
                                                   "(max_text_line_bytes)",
                                                   long_line_at, limits.max_line_bytes),
                                   "max_text_line_bytes", limits.max_line_bytes),
                  long_line_at);
  }
  return Valid();
}

std::string_view ImageName(Image image) {
  switch (image) {
    case Image::kPng:
      return "png";
    case Image::kJpeg:
      return "jpeg";
    case Image::kGif:
      return "gif";
    case Image::kWebp:
      return "webp";
  }
  return "image";
}

std::optional<Image> SniffImage(std::string_view data) {
  if (data.substr(0, kPngSignature.size()) == kPngSignature) return Image::kPng;
  if (data.substr(0, 3) == "\xff\xd8\xff") return Image::kJpeg;
  if (data.substr(0, 6) == "GIF87a" || data.substr(0, 6) == "GIF89a") return Image::kGif;
  if (data.size() >= 12 && data.substr(0, 4) == "RIFF" && data.substr(8, 4) == "WEBP") {
    return Image::kWebp;
  }
  return std::nullopt;
}

Check CheckImage(std::string_view data, Image image, const Limits& limits) {
  if (data.size() > limits.max_image_bytes) {
    return Result(Outcome::kBroken,
                  base::LimitError(absl::StrFormat("image of %d bytes is over %d (max_image_bytes)",
                                                   data.size(), limits.max_image_bytes),
                                   "max_image_bytes", limits.max_image_bytes),
                  0);
  }
  ImageParser parser(data, limits);
  absl::Status s;
  switch (image) {
    case Image::kPng:
      s = parser.Png();
      break;
    case Image::kJpeg:
      s = parser.Jpeg();
      break;
    case Image::kGif:
      s = parser.Gif();
      break;
    case Image::kWebp:
      s = parser.Webp();
      break;
  }
  if (!s.ok()) return Result(Outcome::kBroken, std::move(s), parser.at());
  return Valid();
}

Check CheckSentencePiece(std::string_view data, const Limits& limits) {
  if (data.empty() || data[0] != '\x0a') {
    return Result(Outcome::kNotClass,
                  absl::InvalidArgumentError("the first byte is not the tag of field 1 (pieces)"),
                  0);
  }
  // CodedInputStream reads at most INT_MAX bytes. Over the limit, the first piece is still read
  // (from the bytes under the limit), so that a file that is no model stays kNotClass.
  const uint64_t cap = std::min<uint64_t>(limits.max_sentencepiece_bytes, INT_MAX);
  const bool over = data.size() > cap;
  SentencePieceParser parser(over ? data.substr(0, cap) : data, limits);
  if (absl::Status s = parser.Field(); !s.ok()) {
    if (base::LimitOf(s).has_value()) return Result(Outcome::kBroken, std::move(s), parser.at());
    return Result(Outcome::kNotClass,
                  absl::InvalidArgumentError(
                      absl::StrFormat("the first piece does not parse: %s", s.message())),
                  parser.at());
  }
  if (over) {
    return Result(Outcome::kBroken,
                  base::LimitError(absl::StrFormat("model of %d bytes is over %d "
                                                   "(max_sentencepiece_bytes, at most 2^31-1)",
                                                   data.size(), cap),
                                   "max_sentencepiece_bytes", limits.max_sentencepiece_bytes),
                  0);
  }
  while (!parser.AtEnd()) {
    if (absl::Status s = parser.Field(); !s.ok()) {
      return Result(Outcome::kBroken, std::move(s), parser.at());
    }
  }
  return Valid();
}

}  // namespace ckptscan::content
