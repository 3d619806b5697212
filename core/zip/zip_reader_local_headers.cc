// Each entry's local header, read where the central directory points: the data offset torch
// computes from it, how it differs from the central directory (name, flags, method, CRC and
// sizes, with 0xFFFFFFFF sizes taken from the local ZIP64 extra record), malformed extra fields,
// the data descriptor after the data, and the byte spans each member and descriptor occupies
// (for zip_reader_coverage.cc).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip::internal {
namespace {

using base::ByteReader;
using base::CheckedAdd;
using base::RangeWithin;
using records::kDescriptorSig;
using records::kFlagDescriptor;
using records::kLocalHeaderSize;
using records::kLocalSig;
using records::kMethodStored;
using records::kU32Sentinel;

// The ZIP64 extended-information record's header id (APPNOTE.TXT 4.5.3).
constexpr uint16_t kZip64ExtraId = 0x0001;
// In a LOCAL header the ZIP64 record holds both sizes, uncompressed then compressed (8 bytes
// each), whenever it is there (APPNOTE.TXT 4.5.3).
constexpr uint16_t kLocalZip64SizesBytes = 16;

// Whether an extra field is a well-formed list of (id u16, length u16, data).
bool ExtraWellFormed(std::string_view extra) {
  ByteReader r(extra);
  while (!r.empty()) {
    if (r.remaining() < 4) return false;
    (void)r.ReadU16LE();
    uint16_t len = *r.ReadU16LE();
    if (!r.Skip(len).ok()) return false;
  }
  return true;
}

// What a local extra field's ZIP64 record says about the sizes. Modelled on miniz's
// mz_zip_validate_file, the one place miniz reads a local ZIP64 record (torch never calls it):
// the record's data must hold at least the two 8-byte sizes, uncompressed first. Stricter than
// miniz: a second ZIP64 record is a problem (miniz takes the first; another reader may not).
struct LocalZip64 {
  bool present = false;  // a record with id 0x0001 exists
  bool ok = false;       // exactly one, well-formed, with both sizes: the two fields below
  uint64_t uncompressed = 0;
  uint64_t compressed = 0;
  std::string problem;  // why not ok, for the mismatch message
};

LocalZip64 ReadLocalZip64(std::string_view extra) {
  LocalZip64 out;
  ByteReader r(extra);
  while (!r.empty() && out.problem.empty()) {
    if (r.remaining() < 4) {
      out.problem = "the local extra field is not a list of (id, length) records";
      break;
    }
    const uint16_t id = *r.ReadU16LE();
    const uint16_t len = *r.ReadU16LE();
    absl::StatusOr<std::string_view> body = r.ReadBytes(len);
    if (!body.ok()) {
      out.problem = absl::StrFormat(
          "the local extra field is not a list of (id, length) records (a record of %d bytes "
          "runs past its end)",
          len);
    } else if (id != kZip64ExtraId) {
      continue;
    } else if (out.present) {
      out.problem = "the local extra field has two ZIP64 records";
    } else if (len < kLocalZip64SizesBytes) {
      out.present = true;
      out.problem =
          absl::StrFormat("the local ZIP64 record has %d data bytes, not the %d its two sizes need",
                          len, kLocalZip64SizesBytes);
    } else {
      out.present = true;
      ByteReader sizes(*body);
      out.uncompressed = *sizes.ReadU64LE();
      out.compressed = *sizes.ReadU64LE();
    }
  }
  if (!out.present && out.problem.empty()) out.problem = "no ZIP64 record in the local extra field";
  out.ok = out.present && out.problem.empty();
  return out;
}

}  // namespace

void CheckLocalHeaders(std::string_view data, const std::vector<RawEntry>& raws,
                       std::vector<Entry>& entries, std::vector<Span>& spans,
                       AnomalySink& anomalies) {
  const uint64_t size = data.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    const uint64_t lho = e.local_header_offset;
    if (!e.stat_error.empty()) continue;  // reported by CheckEntries
    if (!RangeWithin(lho, kLocalHeaderSize, size)) {
      anomalies.Add(AnomalyKind::kBadLocalHeader, e.name, lho,
                    "local header runs past the end of the file");
      continue;
    }
    ByteReader r(data.substr(lho, kLocalHeaderSize), lho);
    std::string_view sig = *r.ReadBytes(4);
    (void)r.ReadU16LE();  // version needed
    e.local_flags = *r.ReadU16LE();
    uint16_t lmethod = *r.ReadU16LE();
    (void)r.ReadU32LE();  // DOS time and date
    uint32_t lcrc = *r.ReadU32LE();
    uint32_t lcomp = *r.ReadU32LE();
    uint32_t luncomp = *r.ReadU32LE();
    uint16_t lname_len = *r.ReadU16LE();
    uint16_t lextra_len = *r.ReadU16LE();
    if (sig != kLocalSig) {
      anomalies.Add(AnomalyKind::kBadLocalHeader, e.name, lho,
                    absl::StrFormat("no local header signature at byte offset %d", lho));
      continue;
    }
    // Fits: lho + 30 <= size and both lengths are 16-bit.
    e.data_offset = lho + kLocalHeaderSize + lname_len + lextra_len;
    const uint64_t name_at = lho + kLocalHeaderSize;
    std::string_view lname = data.substr(std::min<uint64_t>(name_at, size), lname_len);
    std::string_view lextra =
        data.substr(std::min<uint64_t>(name_at + lname_len, size), lextra_len);
    e.local_name = std::string(lname);
    e.local_header_ok = true;
    if (lname.size() < lname_len || lextra.size() < lextra_len ||
        !RangeWithin(e.data_offset, e.compressed_size, size)) {
      anomalies.Add(AnomalyKind::kBadLocalHeader, e.name, lho,
                    absl::StrFormat("local header or the %d data bytes after it (from byte "
                                    "offset %d) run past the end of the file",
                                    e.compressed_size, e.data_offset));
      e.local_header_ok = false;
      continue;
    }
    std::vector<std::string> diffs;
    if (lname != e.name) {
      diffs.push_back(absl::StrCat("name ", Quoted(lname), " vs ", Quoted(e.name)));
    }
    if (e.local_flags != e.cd_flags) {
      diffs.push_back(absl::StrFormat("flags 0x%04x vs 0x%04x", e.local_flags, e.cd_flags));
    }
    if (lmethod != e.method) diffs.push_back(absl::StrFormat("method %d vs %d", lmethod, e.method));
    const bool zip64_sizes =
        e.compressed_size >= kU32Sentinel || e.uncompressed_size >= kU32Sentinel;
    // A 0xFFFFFFFF size in a local header is in the local ZIP64 record, which then holds both
    // sizes (Python's zipfile writes this for every member numpy's savez writes: 3.12+ puts
    // 0xFFFFFFFF in both fields whenever it writes the record). Neither torch's miniz nor
    // zipfile reads local sizes; a local header is consistent when what it says, read as the
    // format says, is what the central directory says.
    const bool local_sentinel = lcomp == kU32Sentinel || luncomp == kU32Sentinel;
    const LocalZip64 z64 = ReadLocalZip64(lextra);
    // The sizes the local header gives: from the ZIP64 record when it is used and well-formed.
    const bool from_z64 = local_sentinel && z64.ok;
    const uint64_t lcomp_eff = from_z64 ? z64.compressed : lcomp;
    const uint64_t luncomp_eff = from_z64 ? z64.uncompressed : luncomp;
    auto size_ok = [&](uint32_t local32, uint64_t local, uint64_t cd) {
      if (from_z64) return local == cd && (local32 == kU32Sentinel || local32 == cd);
      // No usable local ZIP64 record: a 0xFFFFFFFF field only stands for a size that needs
      // ZIP64 in the central directory too, as before (a malformed record is still flagged).
      return local32 == cd || (zip64_sizes && local32 == kU32Sentinel && !z64.present);
    };
    // A data descriptor carries the CRC and sizes when the local header has zeros for them
    // (also zeros in the ZIP64 record: Python's zipfile writing to an unseekable stream).
    const bool zeros = lcrc == 0 && lcomp_eff == 0 && luncomp_eff == 0;
    if (!((e.local_flags & kFlagDescriptor) && zeros) &&
        !(lcrc == e.crc32 && size_ok(lcomp, lcomp_eff, e.compressed_size) &&
          size_ok(luncomp, luncomp_eff, e.uncompressed_size))) {
      std::string d = absl::StrFormat("CRC/sizes %08x/%d/%d vs %08x/%d/%d", lcrc, lcomp, luncomp,
                                      e.crc32, e.compressed_size, e.uncompressed_size);
      if (from_z64) {
        absl::StrAppend(&d, absl::StrFormat(" (the local ZIP64 record gives sizes %d/%d)",
                                            z64.compressed, z64.uncompressed));
      } else if (local_sentinel) {
        absl::StrAppend(&d, " (0xFFFFFFFF but ", z64.problem, ")");
      }
      diffs.push_back(std::move(d));
    }
    if (!diffs.empty()) {
      std::string msg =
          "local header differs from the central directory (torch follows the "
          "central directory):";
      for (const std::string& d : diffs) absl::StrAppend(&msg, " ", d, ";");
      msg.pop_back();
      anomalies.Add(AnomalyKind::kLocalHeaderMismatch, e.name, lho, std::move(msg));
    }
    if (!ExtraWellFormed(lextra)) {
      anomalies.Add(AnomalyKind::kMalformedExtraField, e.name, name_at + lname_len,
                    absl::StrFormat("local extra field (%d bytes) is not a list of (id, length) "
                                    "records; torch skips it whole",
                                    lextra_len));
    }
    if (!ExtraWellFormed(raws[i].cd_extra)) {
      anomalies.Add(AnomalyKind::kMalformedExtraField, e.name, e.cd_header_offset,
                    "central-directory extra field is not a list of (id, length) records");
    }

    // What torch reads: STORED takes the uncompressed size from the data offset.
    const uint64_t read_len = e.method == kMethodStored ? e.uncompressed_size : e.compressed_size;
    uint64_t read_end = 0;
    if (!CheckedAdd(e.data_offset, read_len, &read_end) || read_end > size) read_end = size;
    spans.push_back({lho, std::max(read_end, e.data_offset), "member", e.name});

    // The data descriptor torch writes after the data (flag bit 3).
    const uint64_t dd = e.data_offset + e.compressed_size;  // in range: checked above
    if (e.cd_flags & kFlagDescriptor) {
      // 8-byte sizes when the sizes need ZIP64, or the local header has a ZIP64 record (as
      // miniz's mz_zip_validate_file reads it, and Python's zipfile writes it).
      const bool wide = zip64_sizes || z64.ok;
      const uint64_t dd_len = wide ? 24 : 16;
      if (SigAt(data, dd, kDescriptorSig) && RangeWithin(dd, dd_len, size)) {
        ByteReader d(data.substr(dd + 4, dd_len - 4), dd + 4);
        uint32_t dcrc = *d.ReadU32LE();
        uint64_t dcomp = wide ? *d.ReadU64LE() : *d.ReadU32LE();
        uint64_t duncomp = wide ? *d.ReadU64LE() : *d.ReadU32LE();
        if (dcrc != e.crc32 || dcomp != e.compressed_size || duncomp != e.uncompressed_size) {
          anomalies.Add(AnomalyKind::kDataDescriptorMismatch, e.name, dd,
                        absl::StrFormat("data descriptor says CRC %08x, sizes %d/%d; the central "
                                        "directory %08x, %d/%d",
                                        dcrc, dcomp, duncomp, e.crc32, e.compressed_size,
                                        e.uncompressed_size));
        }
        spans.push_back({dd, dd + dd_len, "data descriptor", e.name});
      }
    }
  }
}

}  // namespace ckptscan::zip::internal
