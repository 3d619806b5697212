// The walk over the central directory, entry by entry, as mz_zip_reader_read_central_dir does it:
// miniz's checks (signature, sizes, disks, masked headers, bounds), the ZIP64 extended-information
// field applied as mz_zip_file_stat does, the Limits on entries, names and total size, and
// directory bytes past the counted entries.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/status_macros.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip::internal {
namespace {

using base::ByteReader;
using base::CheckedAdd;
using base::RangeWithin;
using records::kCdHeaderSize;
using records::kCdSig;
using records::kFlagMaskedLocalHeader;
using records::kLocalHeaderSize;
using records::kU32Sentinel;

constexpr uint16_t kZip64ExtraId = 0x0001;

// mz_zip_file_stat_internal's ZIP64 step: sizes and offset from the ZIP64 extended-information
// field when a 32-bit value is the sentinel. Returns an error message, or "".
std::string ApplyZip64Extra(std::string_view extra, Entry& e) {
  if (std::max({e.compressed_size, e.uncompressed_size, e.local_header_offset}) != kU32Sentinel) {
    return "";
  }
  ByteReader r(extra);
  while (!r.empty()) {
    if (r.remaining() < 4) return "extra field ends inside a field header";
    uint16_t id = *r.ReadU16LE();
    uint16_t len = *r.ReadU16LE();
    if (len > r.remaining()) return "extra field longer than the extra data";
    ByteReader field(*r.ReadBytes(len));
    if (id != kZip64ExtraId) continue;
    for (uint64_t* v : {&e.uncompressed_size, &e.compressed_size, &e.local_header_offset}) {
      if (*v != kU32Sentinel) continue;
      auto x = field.ReadU64LE();
      if (!x.ok()) return "ZIP64 extra field too short for the values it replaces";
      *v = *x;
    }
    break;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<RawEntry>> ReadCentralDirectory(std::string_view data,
                                                           const EndRecord& end,
                                                           const Limits& limits,
                                                           AnomalySink& anomalies) {
  const uint64_t size = data.size();
  if (end.total_entries > limits.max_entries) {
    return Limit("max_entries", end.total_entries, limits.max_entries, end.eocd_offset);
  }
  if (end.cd_size > limits.max_central_directory_bytes) {
    return Limit("max_central_directory_bytes", end.cd_size, limits.max_central_directory_bytes,
                 end.eocd_offset);
  }
  // miniz multiplies in 32 bits.
  const uint32_t min_cd = static_cast<uint32_t>(end.total_entries) * 46u;
  if (end.cd_size < min_cd) {
    return Corrupt(end.eocd_offset,
                   absl::StrFormat("central directory of %d bytes cannot hold %d entries",
                                   end.cd_size, end.total_entries));
  }
  if (!RangeWithin(end.cd_offset, end.cd_size, size)) {
    return Corrupt(end.eocd_offset,
                   absl::StrFormat("central directory [%d, +%d) runs past the end of the %d-byte "
                                   "file",
                                   end.cd_offset, end.cd_size, size));
  }
  std::vector<RawEntry> out;
  if (end.total_entries == 0) return out;
  // The count is bounded by max_entries; the directory's size bounds it too (46 bytes each).
  out.reserve(std::min<uint64_t>(end.total_entries, end.cd_size / kCdHeaderSize + 1));
  const std::string_view cd = data.substr(end.cd_offset, end.cd_size);
  uint64_t pos = 0;
  bool has_zip64_info = false;  // miniz's m_zip64_has_extended_info_fields
  uint64_t total_uncompressed = 0;
  for (uint32_t i = 0; i < end.total_entries; ++i) {
    const uint64_t at = end.cd_offset + pos;
    const uint64_t n = cd.size() - pos;
    if (n < kCdHeaderSize || cd.substr(pos, 4) != kCdSig) {
      return Corrupt(at, absl::StrFormat("central directory entry #%d: no header signature", i));
    }
    ByteReader r(cd.substr(pos, kCdHeaderSize), at);
    RawEntry raw;
    Entry& e = raw.entry;
    e.index = i;
    e.cd_header_offset = at;
    CKPT_RETURN_IF_ERROR(r.Skip(8));
    e.cd_flags = *r.ReadU16LE();
    e.method = *r.ReadU16LE();
    e.dos_time = *r.ReadU16LE();
    CKPT_RETURN_IF_ERROR(r.Skip(2));
    e.crc32 = *r.ReadU32LE();
    const uint32_t comp = *r.ReadU32LE();
    const uint32_t uncomp = *r.ReadU32LE();
    const uint16_t name_len = *r.ReadU16LE();
    raw.cd_extra_length = *r.ReadU16LE();
    const uint16_t comment_len = *r.ReadU16LE();
    const uint16_t disk_start = *r.ReadU16LE();
    CKPT_RETURN_IF_ERROR(r.Skip(2));
    e.external_attributes = *r.ReadU32LE();
    const uint32_t lho = *r.ReadU32LE();
    // MZ_READ_LE32(p + MZ_ZIP_CDH_METHOD_OFS): the method and the DOS time, as one u32.
    const uint32_t method_and_time = e.method | (static_cast<uint32_t>(e.dos_time) << 16);
    const uint64_t header_and_name = kCdHeaderSize + name_len;
    std::string_view name_bytes = cd.substr(pos + kCdHeaderSize, name_len);  // may be short
    e.name = std::string(name_bytes);

    if (!has_zip64_info && raw.cd_extra_length != 0 &&
        std::max({comp, uncomp, lho}) == kU32Sentinel) {
      if (header_and_name + raw.cd_extra_length > n) {
        return EntryCorrupt(i, e.name, at, "extra field runs past the central directory");
      }
      ByteReader x(cd.substr(pos + header_and_name, raw.cd_extra_length));
      while (!x.empty()) {
        if (x.remaining() < 4) return EntryCorrupt(i, e.name, at, "truncated extra field");
        uint16_t id = *x.ReadU16LE();
        uint16_t len = *x.ReadU16LE();
        if (len > x.remaining()) return EntryCorrupt(i, e.name, at, "extra field too long");
        if (id == kZip64ExtraId) {
          has_zip64_info = true;
          break;
        }
        CKPT_RETURN_IF_ERROR(x.Skip(len));
      }
    }
    if (comp != kU32Sentinel && uncomp != kU32Sentinel) {
      if ((method_and_time == 0 && uncomp != comp) || (uncomp != 0 && comp == 0)) {
        return EntryCorrupt(i, e.name, at,
                            absl::StrFormat("sizes %d compressed, %d uncompressed are "
                                            "inconsistent",
                                            comp, uncomp));
      }
    }
    if (disk_start == 0xFFFF || (disk_start != end.num_this_disk && disk_start != 1)) {
      return EntryCorrupt(i, e.name, at, absl::StrFormat("multi-disk entry (disk %d)", disk_start));
    }
    if (comp != kU32Sentinel) {
      uint64_t local_end = uint64_t{lho} + kLocalHeaderSize + comp;  // < 2^34: no overflow
      if (local_end > size) {
        return EntryCorrupt(i, e.name, at,
                            absl::StrFormat("local header at %d plus %d data bytes runs past the "
                                            "end of the %d-byte file",
                                            lho, comp, size));
      }
    }
    if (e.cd_flags & kFlagMaskedLocalHeader) {
      return EntryCorrupt(i, e.name, at, "masked local headers (flag 0x2000) are not supported");
    }
    const uint64_t total_header = header_and_name + raw.cd_extra_length + comment_len;
    if (total_header > n) {
      return EntryCorrupt(i, e.name, at, "entry runs past the end of the central directory");
    }
    if (name_len > limits.max_name_bytes) {
      return Limit("max_name_bytes", name_len, limits.max_name_bytes, at, e.name);
    }
    raw.cd_extra = cd.substr(pos + header_and_name, raw.cd_extra_length);
    e.compressed_size = comp;
    e.uncompressed_size = uncomp;
    e.local_header_offset = lho;
    e.stat_error = ApplyZip64Extra(raw.cd_extra, e);
    if (!CheckedAdd(total_uncompressed, e.uncompressed_size, &total_uncompressed) ||
        total_uncompressed > limits.max_total_uncompressed) {
      return Limit("max_total_uncompressed", total_uncompressed, limits.max_total_uncompressed, at,
                   e.name);
    }
    pos += total_header;
    out.push_back(std::move(raw));
  }
  if (pos < cd.size()) {
    anomalies.Add(AnomalyKind::kCentralDirectorySlack, "", end.cd_offset + pos,
                  absl::StrFormat("%d central-directory bytes after the %d entries counted by the "
                                  "end record; miniz never reads them",
                                  cd.size() - pos, end.total_entries));
  }
  return out;
}

}  // namespace ckptscan::zip::internal
