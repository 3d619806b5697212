#include "core/compress/decompress.h"

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/checked.h"
#include "base/limit_status.h"
#include "base/status_macros.h"

namespace ckptscan::compress {
namespace {

struct Prefix {
  std::string_view bytes;
  Codec codec;
};

// joblib/compressor.py's prefixes, in joblib's registration order (joblib/numpy_pickle.py).
constexpr Prefix kPrefixes[] = {
    {{"\x78", 1}, Codec::kZlib},
    {{"\x1f\x8b", 2}, Codec::kGzip},
    {{"BZ", 2}, Codec::kBz2},
    {{"\x5d\x00", 2}, Codec::kLzma},
    {{"\xfd\x37\x7a\x58\x5a", 5}, Codec::kXz},
    {{"\x04\x22\x4d\x18", 4}, Codec::kLz4},
};

// One call of a decoder: how it went.
enum class Step {
  kProgress,   // call again (a call that moves nothing twice in a row counts as kStuck)
  kStreamEnd,  // the stream's end marker (and checksum) was read
  kStuck,      // no progress is possible without more input
  kError,      // the input is not a valid stream
  kMemLimit,   // the decoder would need more than max_decoder_memory
};

// At most this much input per call (zlib and libbz2 count in unsigned int).
constexpr size_t kMaxInputPerCall = size_t{1} << 30;
// At most this much output per call, so that the limits are checked often.
constexpr size_t kMaxOutputPerCall = size_t{1} << 20;
constexpr size_t kInitialOutput = size_t{64} << 10;

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Decodes from in[0, in_len) into out[0, out_len): *used and *produced say how much.
  virtual Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* used,
                   size_t* produced, std::string* why) = 0;
};

class ZlibDecoder final : public Decoder {
 public:
  // wbits 15 (zlib) or 31 (gzip), as joblib's BinaryZlibFile / BinaryGzipFile.
  absl::Status Init(int wbits) {
    if (inflateInit2(&zs_, wbits) != Z_OK) return absl::InternalError("inflateInit2 failed");
    live_ = true;
    return absl::OkStatus();
  }
  ~ZlibDecoder() override {
    if (live_) inflateEnd(&zs_);
  }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* used,
           size_t* produced, std::string* why) override {
    zs_.next_in = in;
    zs_.avail_in = static_cast<uInt>(in_len);
    zs_.next_out = out;
    zs_.avail_out = static_cast<uInt>(out_len);
    const int ret = inflate(&zs_, Z_NO_FLUSH);
    *used = in_len - zs_.avail_in;
    *produced = out_len - zs_.avail_out;
    switch (ret) {
      case Z_OK:
        return Step::kProgress;
      case Z_STREAM_END:
        return Step::kStreamEnd;
      case Z_BUF_ERROR:
        return Step::kStuck;
      case Z_NEED_DICT:
        *why = "the stream needs a preset dictionary";
        return Step::kError;
      default:
        *why = zs_.msg != nullptr ? zs_.msg : "inflate failed";
        return Step::kError;
    }
  }

 private:
  z_stream zs_{};
  bool live_ = false;
};

class Bz2Decoder final : public Decoder {
 public:
  absl::Status Init() {
    if (BZ2_bzDecompressInit(&bs_, 0, 0) != BZ_OK) {
      return absl::InternalError("BZ2_bzDecompressInit failed");
    }
    live_ = true;
    return absl::OkStatus();
  }
  ~Bz2Decoder() override {
    if (live_) BZ2_bzDecompressEnd(&bs_);
  }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* used,
           size_t* produced, std::string* why) override {
    // libbz2 never writes through next_in.
    bs_.next_in = const_cast<char*>(reinterpret_cast<const char*>(in));
    bs_.avail_in = static_cast<unsigned int>(in_len);
    bs_.next_out = reinterpret_cast<char*>(out);
    bs_.avail_out = static_cast<unsigned int>(out_len);
    const int ret = BZ2_bzDecompress(&bs_);
    *used = in_len - bs_.avail_in;
    *produced = out_len - bs_.avail_out;
    switch (ret) {
      case BZ_OK:
        return Step::kProgress;
      case BZ_STREAM_END:
        return Step::kStreamEnd;
      case BZ_DATA_ERROR_MAGIC:
        *why = "not a bzip2 stream (bad magic)";
        return Step::kError;
      case BZ_MEM_ERROR:
        *why = "out of memory";
        return Step::kError;
      default:
        *why = "invalid bzip2 data";
        return Step::kError;
    }
  }

 private:
  bz_stream bs_{};
  bool live_ = false;
};

// lzma.LZMADecompressor(FORMAT_AUTO): xz or lzma-alone, one stream per decoder.
class LzmaDecoder final : public Decoder {
 public:
  absl::Status Init(uint64_t memlimit) {
    // The flags CPython's _lzma passes for FORMAT_AUTO.
    const lzma_ret ret = lzma_auto_decoder(&ls_, std::max<uint64_t>(memlimit, 1),
                                           LZMA_TELL_ANY_CHECK | LZMA_TELL_NO_CHECK);
    if (ret != LZMA_OK) return absl::InternalError("lzma_auto_decoder failed");
    return absl::OkStatus();
  }
  ~LzmaDecoder() override { lzma_end(&ls_); }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* used,
           size_t* produced, std::string* why) override {
    ls_.next_in = in;
    ls_.avail_in = in_len;
    ls_.next_out = out;
    ls_.avail_out = out_len;
    const lzma_ret ret = lzma_code(&ls_, LZMA_RUN);
    *used = in_len - ls_.avail_in;
    *produced = out_len - ls_.avail_out;
    switch (ret) {
      case LZMA_OK:
      case LZMA_GET_CHECK:
      case LZMA_NO_CHECK:
        return Step::kProgress;
      case LZMA_STREAM_END:
        return Step::kStreamEnd;
      case LZMA_BUF_ERROR:
        return Step::kStuck;
      case LZMA_MEMLIMIT_ERROR:
        return Step::kMemLimit;
      case LZMA_MEM_ERROR:
        *why = "out of memory";
        return Step::kError;
      case LZMA_FORMAT_ERROR:
        *why = "not an xz or lzma stream";
        return Step::kError;
      case LZMA_OPTIONS_ERROR:
        *why = "unsupported lzma options";
        return Step::kError;
      default:
        *why = "corrupt lzma data";
        return Step::kError;
    }
  }

 private:
  lzma_stream ls_ = LZMA_STREAM_INIT;
};

class Lz4Decoder final : public Decoder {
 public:
  absl::Status Init() {
    if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx_, LZ4F_VERSION))) {
      return absl::InternalError("LZ4F_createDecompressionContext failed");
    }
    return absl::OkStatus();
  }
  ~Lz4Decoder() override {
    if (ctx_ != nullptr) LZ4F_freeDecompressionContext(ctx_);
  }
  Step Run(const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len, size_t* used,
           size_t* produced, std::string* why) override {
    size_t dst = out_len;
    size_t src = in_len;
    const size_t ret = LZ4F_decompress(ctx_, out, &dst, in, &src, nullptr);
    *used = src;
    *produced = dst;
    if (LZ4F_isError(ret)) {
      *why = LZ4F_getErrorName(ret);
      return Step::kError;
    }
    if (ret == 0) return Step::kStreamEnd;  // the frame is fully decoded
    return Step::kProgress;
  }

 private:
  LZ4F_dctx* ctx_ = nullptr;
};

absl::StatusOr<std::unique_ptr<Decoder>> MakeDecoder(Codec codec, const Limits& limits) {
  switch (codec) {
    case Codec::kZlib:
    case Codec::kGzip: {
      auto d = std::make_unique<ZlibDecoder>();
      absl::Status s = d->Init(codec == Codec::kZlib ? 15 : 31);
      if (!s.ok()) return s;
      return std::unique_ptr<Decoder>(std::move(d));
    }
    case Codec::kBz2: {
      auto d = std::make_unique<Bz2Decoder>();
      absl::Status s = d->Init();
      if (!s.ok()) return s;
      return std::unique_ptr<Decoder>(std::move(d));
    }
    case Codec::kLzma:
    case Codec::kXz: {
      auto d = std::make_unique<LzmaDecoder>();
      absl::Status s = d->Init(limits.max_decoder_memory);
      if (!s.ok()) return s;
      return std::unique_ptr<Decoder>(std::move(d));
    }
    case Codec::kLz4: {
      auto d = std::make_unique<Lz4Decoder>();
      absl::Status s = d->Init();
      if (!s.ok()) return s;
      return std::unique_ptr<Decoder>(std::move(d));
    }
  }
  return absl::InvalidArgumentError("unknown codec");
}

// Whether bytes after a stream that fail to start a new one are ignored rather than an error
// (_compression.DecompressReader's trailing_error: OSError for bz2, LZMAError for lzma; lz4's
// LZ4FrameFile passes none).
bool IgnoresTrailingGarbage(Codec codec, Streams streams) {
  if (streams == Streams::kAll) return true;
  return codec == Codec::kBz2 || codec == Codec::kLzma || codec == Codec::kXz;
}

// Whether the loader reads streams after the first.
bool ReadsFurtherStreams(Codec codec, Streams streams) {
  if (streams == Streams::kAll) return true;
  return codec != Codec::kZlib && codec != Codec::kGzip;
}

}  // namespace

std::string_view CodecName(Codec codec) {
  switch (codec) {
    case Codec::kZlib: return "zlib";
    case Codec::kGzip: return "gzip";
    case Codec::kBz2: return "bz2";
    case Codec::kLzma: return "lzma";
    case Codec::kXz: return "xz";
    case Codec::kLz4: return "lz4";
  }
  return "?";
}

std::optional<Codec> DetectJoblibCodec(std::string_view data) {
  if (IsJoblibCompat(data)) return std::nullopt;
  for (const Prefix& p : kPrefixes) {
    if (data.substr(0, p.bytes.size()) == p.bytes) return p.codec;
  }
  return std::nullopt;
}

bool IsJoblibCompat(std::string_view data) { return data.substr(0, 2) == "ZF"; }

absl::StatusOr<Decompressed> DecompressJoblib(std::string_view data, Codec codec,
                                              const Limits& limits, Streams streams) {
  Decompressed r;
  const uint64_t max_out = limits.max_decompressed_bytes;
  std::string out;  // out[0, filled) is decoded; the rest is room
  uint64_t filled = 0;
  uint64_t pos = 0;  // start of the current stream
  bool later_stream = false;
  auto finish = [&](End end, absl::Status stop, uint64_t offset) {
    out.resize(filled);
    r.bytes = std::move(out);
    r.end = end;
    r.stop = std::move(stop);
    r.stop_offset = offset;
    return r;
  };
  const std::string codec_name(CodecName(codec));
  while (true) {
    absl::StatusOr<std::unique_ptr<Decoder>> decoder = MakeDecoder(codec, limits);
    if (!decoder.ok()) return decoder.status();
    uint64_t in_pos = pos;
    const uint64_t stream_start_out = filled;
    int idle_calls = 0;  // consecutive calls that consumed and produced nothing
    while (true) {
      if (filled == out.size()) {
        // Room for one byte past the limit, so that going over it is seen.
        const uint64_t cap = max_out == UINT64_MAX ? max_out : max_out + 1;
        if (out.size() >= cap) {
          filled = std::min<uint64_t>(filled, max_out);
          return finish(End::kLimit,
                        base::LimitError(absl::StrCat(codec_name,
                                                      ": more than max_decompressed_bytes (",
                                                      max_out, ") decompressed"),
                                         "max_decompressed_bytes", max_out),
                        in_pos);
        }
        const uint64_t grown =
            std::min<uint64_t>(cap, std::max<uint64_t>(out.size() * 2, kInitialOutput));
        out.resize(grown);
      }
      const size_t in_len = std::min<uint64_t>(data.size() - in_pos, kMaxInputPerCall);
      const size_t out_len = std::min<uint64_t>(out.size() - filled, kMaxOutputPerCall);
      size_t used = 0;
      size_t produced = 0;
      std::string why;
      Step step = (*decoder)->Run(reinterpret_cast<const uint8_t*>(data.data()) + in_pos,
                                        in_len, reinterpret_cast<uint8_t*>(out.data()) + filled,
                                        out_len, &used, &produced, &why);
      in_pos += used;
      filled += produced;
      // A decoder may take one call to set itself up (liblzma's auto decoder does); a second
      // call in a row that moves nothing means it needs input it cannot have.
      idle_calls = used == 0 && produced == 0 ? idle_calls + 1 : 0;
      if (step == Step::kProgress && idle_calls >= 2) step = Step::kStuck;
      if (filled > max_out) continue;  // reported at the top of the loop
      uint64_t bound = 0;
      if (filled > kRatioFloor &&
          base::CheckedMul(limits.max_compression_ratio, in_pos, &bound) && filled > bound) {
        return finish(End::kLimit,
                      base::LimitError(absl::StrCat(codec_name, ": ", filled,
                                                    " bytes decompressed from ", in_pos,
                                                    ", over max_joblib_compression_ratio (",
                                                    limits.max_compression_ratio, ")"),
                                       "max_joblib_compression_ratio", limits.max_compression_ratio),
                      in_pos);
      }
      const bool nothing_from_stream = filled == stream_start_out;
      switch (step) {
        case Step::kProgress:
          continue;
        case Step::kStreamEnd:
          break;
        case Step::kMemLimit:
          return finish(End::kLimit,
                        base::LimitError(absl::StrCat(codec_name,
                                                      ": the decoder needs more memory than "
                                                      "max_decoder_memory (",
                                                      limits.max_decoder_memory, ")"),
                                         "max_decoder_memory", limits.max_decoder_memory),
                        in_pos);
        case Step::kError:
          if (later_stream && nothing_from_stream && IgnoresTrailingGarbage(codec, streams)) {
            r.trailing_offset = pos;
            r.trailing_bytes = data.size() - pos;
            return finish(End::kClean, absl::OkStatus(), pos);
          }
          return finish(End::kCorrupt,
                        absl::InvalidArgumentError(absl::StrCat(
                            codec_name, ": corrupt stream at compressed offset ", in_pos, " (",
                            why, ")")),
                        in_pos);
        case Step::kStuck:
          if (in_pos < data.size()) {
            // Input left, room left, and still no progress: never loop on it.
            if (filled == out.size()) continue;
            return finish(End::kCorrupt,
                          absl::InvalidArgumentError(absl::StrCat(
                              codec_name, ": the decoder stopped at compressed offset ", in_pos)),
                          in_pos);
          }
          return finish(End::kTruncated,
                        absl::InvalidArgumentError(absl::StrCat(
                            codec_name, ": truncated stream (the file ends at ", in_pos,
                            " inside stream ", r.streams + 1, ")")),
                        in_pos);
      }
      break;  // kStreamEnd
    }
    ++r.streams;
    pos = in_pos;
    if (pos == data.size()) return finish(End::kClean, absl::OkStatus(), pos);
    if (!ReadsFurtherStreams(codec, streams)) {
      r.trailing_offset = pos;
      r.trailing_bytes = data.size() - pos;
      return finish(End::kClean, absl::OkStatus(), pos);
    }
    later_stream = true;
  }
}

absl::StatusOr<JoblibCompat> DecompressJoblibCompat(std::string_view data, const Limits& limits) {
  JoblibCompat r;
  r.stream_offset = std::min<uint64_t>(data.size(), kJoblibCompatHeaderBytes);
  r.length_field = data.substr(0, r.stream_offset).substr(std::min<size_t>(r.stream_offset, 2));
  if (r.stream_offset < data.size() && data[r.stream_offset] == ' ') ++r.stream_offset;
  CKPT_ASSIGN_OR_RETURN(r.stream,
                        DecompressJoblib(data.substr(r.stream_offset), Codec::kZlib, limits));
  return r;
}

}  // namespace ckptscan::compress
