// Reading one member's bytes as mz_zip_reader_extract_to_mem does for torch's getRecord: the
// checks miniz makes before extracting, the data offset from the local header, STORED members as
// views, DEFLATE members inflated (zlib, stopping where miniz's tinfl stops) under the member
// Limits, and the member-level anomalies (short or padded streams, CRC, nested archives).
#include <zlib.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip {
namespace {

using base::ByteReader;
using base::CheckedMul;
using base::RangeWithin;
using internal::AnomalySink;
using internal::IsDirectory;
using internal::Limit;
using internal::LooksLikeZip;
using internal::MemberError;
using records::kFlagEncrypted;
using records::kFlagPatch;
using records::kFlagStrongEncryption;
using records::kLocalHeaderSize;
using records::kLocalSig;
using records::kMethodDeflate;
using records::kMethodStored;

// zlib counts in uInt; we feed it in slices of this size.
constexpr uint64_t kInflateSlice = 1u << 30;

enum class InflateEnd { kDone, kOutputFull, kNeedsInput, kError };

struct Inflated {
  InflateEnd end = InflateEnd::kError;
  uint64_t produced = 0;
  uint64_t consumed = 0;
  std::string error;
};

// Raw DEFLATE into out[0, out_size), as miniz's tinfl does it for extract_to_mem: stops at the
// stream end, when the output is full, when input runs out, or at corrupt data.
Inflated Inflate(std::string_view in, char* out, uint64_t out_size) {
  Inflated res;
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
    res.error = "zlib inflateInit2 failed";
    return res;
  }
  char dummy = 0;
  uint64_t fed_in = 0, fed_out = 0;
  zs.next_out = reinterpret_cast<Bytef*>(out_size ? out : &dummy);
  for (;;) {
    bool refilled = false;
    if (zs.avail_in == 0 && fed_in < in.size()) {
      uint64_t n = std::min<uint64_t>(in.size() - fed_in, kInflateSlice);
      zs.next_in = reinterpret_cast<const Bytef*>(in.data() + fed_in);
      zs.avail_in = static_cast<uInt>(n);
      fed_in += n;
      refilled = true;
    }
    if (zs.avail_out == 0 && fed_out < out_size) {
      uint64_t n = std::min<uint64_t>(out_size - fed_out, kInflateSlice);
      zs.next_out = reinterpret_cast<Bytef*>(out + fed_out);
      zs.avail_out = static_cast<uInt>(n);
      fed_out += n;
      refilled = true;
    }
    int ret = inflate(&zs, Z_NO_FLUSH);
    res.produced = fed_out - zs.avail_out;
    res.consumed = fed_in - zs.avail_in;
    if (ret == Z_STREAM_END) {
      res.end = InflateEnd::kDone;
      break;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR) {
      if (refilled) continue;
      res.end = res.produced == out_size ? InflateEnd::kOutputFull : InflateEnd::kNeedsInput;
      break;
    }
    res.end = InflateEnd::kError;
    res.error = zs.msg ? zs.msg : absl::StrCat("zlib error ", ret);
    break;
  }
  inflateEnd(&zs);
  return res;
}

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

}  // namespace

absl::StatusOr<Member> Archive::Read(const Entry& e) const { return ReadEntry(data_, e, limits_); }

absl::StatusOr<Member> Archive::ReadEntry(std::string_view data, const Entry& e,
                                          const Limits& limits) {
  const uint64_t size = data.size();
  Member m;
  m.declared_size_ = e.uncompressed_size;
  // mz_zip_reader_file_stat (and mz_zip_reader_is_file_supported, which it calls).
  if (!e.stat_error.empty()) return MemberError(e, e.cd_header_offset, e.stat_error);
  if (e.method != kMethodStored && e.method != kMethodDeflate) {
    return MemberError(e, e.cd_header_offset, absl::StrFormat("unsupported method %d", e.method));
  }
  if (e.cd_flags & (kFlagEncrypted | kFlagStrongEncryption)) {
    return MemberError(e, e.cd_header_offset, "unsupported encryption");
  }
  if (e.cd_flags & kFlagPatch) return MemberError(e, e.cd_header_offset, "unsupported feature");
  AnomalySink anomalies(&m.anomalies_, limits.max_anomalies_per_kind);
  // A directory or an empty member: miniz extracts nothing; torch keeps its malloc'd buffer.
  if (IsDirectory(e) || e.compressed_size == 0) {
    m.complete_ = e.uncompressed_size == 0;
    if (!m.complete_) {
      anomalies.Add(AnomalyKind::kDirectoryEntry, e.name, e.cd_header_offset,
                    absl::StrFormat("miniz extracts nothing; torch would use %d uninitialised "
                                    "bytes",
                                    e.uncompressed_size));
    }
    anomalies.Flush();
    return m;
  }
  const uint64_t lho = e.local_header_offset;
  if (!RangeWithin(lho, kLocalHeaderSize, size)) {
    return MemberError(e, lho, "local header runs past the end of the file");
  }
  if (data.substr(lho, 4) != kLocalSig) {
    return MemberError(e, lho,
                       "invalid header or archive is corrupted: no local header "
                       "signature");
  }
  // getRecordOffset and extract_to_mem both skip the local name and extra by their lengths.
  ByteReader r(data.substr(lho + 26, 4), lho + 26);
  const uint16_t local_name_len = *r.ReadU16LE();
  const uint16_t local_extra_len = *r.ReadU16LE();
  const uint64_t data_offset = lho + kLocalHeaderSize + local_name_len + local_extra_len;
  if (!RangeWithin(data_offset, e.compressed_size, size)) {
    return MemberError(
        e, data_offset,
        absl::StrFormat("%d data bytes run past the end of the file", e.compressed_size));
  }
  if (e.method == kMethodStored) {
    // miniz reads the *uncompressed* size here.
    if (!RangeWithin(data_offset, e.uncompressed_size, size)) {
      return MemberError(e, data_offset,
                         absl::StrFormat("file read failed: %d bytes run past the end of the "
                                         "file",
                                         e.uncompressed_size));
    }
    m.view_ = data.substr(data_offset, e.uncompressed_size);
  } else {
    if (e.uncompressed_size > limits.max_member_bytes) {
      return Limit("max_member_bytes", e.uncompressed_size, limits.max_member_bytes, data_offset,
                   e.name);
    }
    uint64_t ratio_cap = 0;
    if (CheckedMul(e.compressed_size, limits.max_compression_ratio, &ratio_cap) &&
        e.uncompressed_size > ratio_cap) {
      return Limit("max_compression_ratio",
                   e.uncompressed_size / std::max<uint64_t>(e.compressed_size, 1),
                   limits.max_compression_ratio, data_offset, e.name);
    }
    std::string out(e.uncompressed_size, '\0');
    Inflated inf = Inflate(data.substr(data_offset, e.compressed_size), out.data(), out.size());
    switch (inf.end) {
      case InflateEnd::kDone:
        // miniz's one check after a complete stream.
        if (inf.produced != e.uncompressed_size) {
          return MemberError(e, data_offset,
                             absl::StrFormat("unexpected decompressed size: the stream holds %d "
                                             "bytes, the directory says %d",
                                             inf.produced, e.uncompressed_size));
        }
        if (inf.consumed < e.compressed_size) {
          anomalies.Add(AnomalyKind::kInflateMismatch, e.name, data_offset + inf.consumed,
                        absl::StrFormat("%d compressed bytes after the end of the DEFLATE "
                                        "stream (ignored by torch)",
                                        e.compressed_size - inf.consumed));
        }
        break;
      case InflateEnd::kOutputFull:
        anomalies.Add(AnomalyKind::kInflateMismatch, e.name, data_offset + inf.consumed,
                      absl::StrFormat("the DEFLATE stream goes on past the declared %d bytes; "
                                      "miniz stops there without an error, torch reads the "
                                      "first %d",
                                      e.uncompressed_size, e.uncompressed_size));
        break;
      case InflateEnd::kNeedsInput:
      case InflateEnd::kError:
        anomalies.Add(AnomalyKind::kInflateMismatch, e.name, data_offset + inf.consumed,
                      absl::StrFormat("DEFLATE stream %s after %d of %d bytes; miniz stops "
                                      "without an error and torch reads the rest of its buffer "
                                      "uninitialised",
                                      inf.end == InflateEnd::kError
                                          ? absl::StrCat("corrupt (", inf.error, ")")
                                          : std::string("truncated"),
                                      inf.produced, e.uncompressed_size));
        m.complete_ = false;
        out.resize(inf.produced);
        break;
    }
    m.owned_ = std::move(out);
    if (LooksLikeZip(m.bytes())) {
      anomalies.Add(AnomalyKind::kNestedArchive, e.name, data_offset,
                    "the member's inflated bytes are a zip archive");
    }
  }
  if (m.complete_) {
    uint32_t crc = Crc32(m.bytes());
    if (crc != e.crc32) {
      anomalies.Add(AnomalyKind::kCrcMismatch, e.name, data_offset,
                    absl::StrFormat("CRC-32 of the %d bytes torch reads is %08x, the central "
                                    "directory says %08x (torch does not check)",
                                    m.bytes().size(), crc, e.crc32));
    }
  }
  anomalies.Flush();
  return m;
}

}  // namespace ckptscan::zip
