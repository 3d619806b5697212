// Decompression of joblib's compressed files, as joblib.load reads them (joblib 1.2,
// joblib/compressor.py and joblib/numpy_pickle_utils.py; CPython 3.11's _compression.py;
// python3-lz4 4.0's lz4.frame). A parser of untrusted bytes: worker side only.
//
// joblib.load sniffs the first bytes (_detect_compressor): b"ZF" is joblib < 0.10's own format
// (DecompressJoblibCompat, below), then, in joblib's registration order, zlib b"\x78", gzip
// b"\x1f\x8b", bz2 b"BZ", lzma b"\x5d\x00", xz b"\xfd7zXZ", lz4 b"\x04\x22\x4d\x18". What the
// loader sees per codec:
//
//   zlib, gzip  joblib's BinaryZlibFile / BinaryGzipFile (zlib, wbits 15 / 31): the FIRST
//               stream only. Past its end the loader never returns another byte (it feeds the
//               unused data back to the finished decompressor forever, or sees EOF).
//   bz2         bz2.BZ2File; lzma and xz: lzma.LZMAFile (FORMAT_AUTO, so each stream of either
//               prefix may be xz or lzma-alone). Streams are decoded one after another; bytes
//               after a stream that fail to start a new one are ignored.
//   lz4         lz4.frame.LZ4FrameFile: frames one after another (skippable frames skipped);
//               bytes after a frame that fail to start a new one raise (not ignored).
//
// A truncated or corrupt stream delivers what was decoded before the damage, then the loader
// fails (or, truncated zlib/gzip, sees EOF). Decompression returns those bytes and where and
// why it stopped; callers must treat any stop as "the loader did not read a whole stream".
// Where Python would lose the bytes of a block it could not decode, we return them: the result
// is never shorter than what the loader sees.
//
// Nothing recurses; declared sizes are never trusted; the output grows geometrically, never
// beyond max_decompressed_bytes + 1, and every limit is a named limit error
// (base::LimitError).
//
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_COMPRESS_DECOMPRESS_H_
#define CKPTSCAN_CORE_COMPRESS_DECOMPRESS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckptscan::compress {

// joblib's compressor names, in its registration order.
enum class Codec { kZlib, kGzip, kBz2, kLzma, kXz, kLz4 };

// "zlib", "gzip", "bz2", "lzma", "xz", "lz4" (joblib's names).
std::string_view CodecName(Codec codec);

// joblib's _detect_compressor, without "compat": the codec whose prefix `data` starts with.
std::optional<Codec> DetectJoblibCodec(std::string_view data);

// joblib < 0.10's format (b"ZF"), which joblib.load hands to its compatibility loader.
bool IsJoblibCompat(std::string_view data);

struct Limits {
  // Bytes of decompressed output (the whole result, every stream). The output buffer never
  // grows past this + 1 byte.
  uint64_t max_decompressed_bytes = 1ull << 30;
  // Decompressed / compressed bytes consumed so far, checked once the output passes
  // kRatioFloor. Above DEFLATE's maximum (~1032), so zlib and gzip are bounded by
  // max_decompressed_bytes alone; bz2 and xz reach millions on long runs of one byte.
  uint64_t max_compression_ratio = 1100;
  // liblzma's memory limit for one decoder: an lzma-alone header declares its dictionary
  // size (up to 4 GiB), which the decoder allocates. xz -9 needs ~65 MiB.
  uint64_t max_decoder_memory = 256ull << 20;
};

// Output below this never trips max_compression_ratio (small files compress unevenly).
inline constexpr uint64_t kRatioFloor = 1 << 20;

// How decompression ended.
enum class End {
  kClean,      // every stream the loader reads ended with its end marker (and checksum)
  kTruncated,  // the input ended inside a stream
  kCorrupt,    // the decoder rejected the input (data, header or checksum error)
  kLimit,      // a Limits field was hit; `stop` names it
};

struct Decompressed {
  std::string bytes;     // what the loader reads, up to where decompression stopped
  End end = End::kClean;
  absl::Status stop;     // OK when kClean; the reason otherwise (ResourceExhausted for kLimit)
  uint64_t stop_offset = 0;  // compressed offset of the stop (kClean: end of the last stream)
  uint64_t streams = 0;      // streams (lz4: frames) decoded to their end
  // Compressed bytes after the last stream decoded that the loader never decompresses: after
  // the first zlib/gzip stream; for bz2/lzma/xz, bytes that fail to start a stream (ignored).
  uint64_t trailing_offset = 0;
  uint64_t trailing_bytes = 0;
};

// Which streams are read.
enum class Streams {
  kJoblib,  // exactly those joblib.load reads (above)
  kAll,     // every stream one after another, for any codec (gzip.open reads all members);
            // bytes after a stream that fail to start a new one end it, as trailing bytes
};

// Decompresses `data` (starting with the codec's stream) as joblib.load reads it. The status
// is an error only when a decoder cannot be set up at all; stops are in the result.
absl::StatusOr<Decompressed> DecompressJoblib(std::string_view data, Codec codec,
                                              const Limits& limits,
                                              Streams streams = Streams::kJoblib);

// joblib < 0.10's "ZF" file as joblib.load reads it (joblib/numpy_pickle_compat.py read_zfile):
// "ZF", then the data's length in the next 19 bytes, which joblib reads with int(text, 16), then
// one byte that is skipped when it is a space (joblib <= 0.8.4 under Python 2 wrote one), then
// one zlib stream that zlib.decompress reads whole (bytes after its end are ignored; a truncated
// or corrupt stream raises). joblib then asserts that the data has exactly that length.
inline constexpr uint64_t kJoblibCompatHeaderBytes = 2 + 19;

struct JoblibCompat {
  // The stream as DecompressJoblib(kZlib) reads it, offsets relative to `stream_offset`.
  Decompressed stream;
  uint64_t stream_offset = 0;  // where the zlib stream starts in the file (21 or 22)
  // The length field as joblib reads it (fewer than 19 bytes in a shorter file), a view of the
  // caller's data: the caller applies Python's int(text, 16) (core/pickle/literals.h).
  std::string_view length_field;
};

// Reads a "ZF" file (IsJoblibCompat) as joblib.load does. An error only when the decoder
// cannot be set up; stops are in `stream`.
absl::StatusOr<JoblibCompat> DecompressJoblibCompat(std::string_view data, const Limits& limits);

}  // namespace ckptscan::compress

#endif  // CKPTSCAN_CORE_COMPRESS_DECOMPRESS_H_
