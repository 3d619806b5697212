#include "core/zip/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/zip/records.h"

namespace ckptscan::zip {
namespace {

using base::AbslView;
using base::ByteReader;
using base::CheckedAdd;
using base::CheckedMul;
using base::RangeWithin;

// Record signatures and sizes (APPNOTE.TXT; miniz's MZ_ZIP_* constants).
using records::kLocalSig;
using records::kCdSig;
using records::kEocdSig;
using records::kZip64EocdSig;
using records::kZip64LocatorSig;
using records::kDescriptorSig;
using records::kLocalHeaderSize;
using records::kCdHeaderSize;
using records::kEocdSize;
using records::kZip64EocdSize;
using records::kZip64LocatorSize;
using records::kFlagUtf8;
// miniz searches for the end record in 4 KiB blocks, backwards, and gives up once a block starts
// 0xFFFF + 22 bytes or more before the end (the largest comment plus the record).
constexpr uint64_t kEocdSearchBlock = 4096;
constexpr uint64_t kEocdSearchSpan = 0xFFFF + kEocdSize;

constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kFlagDeflateOptions = 0x0006;
constexpr uint16_t kFlagDescriptor = 0x0008;
constexpr uint16_t kFlagPatch = 0x0020;
constexpr uint16_t kFlagStrongEncryption = 0x0040;
constexpr uint16_t kFlagMaskedLocalHeader = 0x2000;
constexpr uint16_t kFlagsTorchMayWrite = kFlagDeflateOptions | kFlagDescriptor | kFlagUtf8;
constexpr uint32_t kDosDirectoryAttribute = 0x10;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflate = 8;
constexpr uint32_t kU32Sentinel = 0xFFFFFFFF;
// PyTorchStreamReader::getAllRecords copies names into a buffer of this size
// (MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE), truncating longer ones.
constexpr size_t kTorchNameBuffer = 512;
constexpr uint64_t kMinSupportedVersion = 1;  // caffe2/serialize/versions.h, torch 1.13
constexpr uint64_t kMaxSupportedVersion = 10;
// zlib counts in uInt; we feed it in slices of this size.
constexpr uint64_t kInflateSlice = 1u << 30;

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

std::string Quoted(std::string_view s) { return absl::StrCat("\"", Printable(s), "\""); }

bool IsUpper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
// MZ_TOLOWER: ASCII letters only.
unsigned char MzToLower(unsigned char c) { return IsUpper(c) ? c - 'A' + 'a' : c; }

std::string MzLowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(MzToLower(static_cast<unsigned char>(c)));
  return out;
}

// A C string's view of `s`: up to the first NUL (what strlen/strncmp/c_str consumers see).
std::string_view CString(std::string_view s) {
  size_t nul = s.find('\0');
  return nul == std::string_view::npos ? s : s.substr(0, nul);
}

bool MustFlagByDefault(AnomalyKind kind) {
  return kind != AnomalyKind::kArchiveComment && kind != AnomalyKind::kDeflated;
}

// Appends anomalies, at most Limits::max_anomalies_per_kind of each kind; Flush() then adds one
// summary per kind that overflowed.
class AnomalySink {
 public:
  AnomalySink(std::vector<Anomaly>* out, uint64_t cap) : out_(out), cap_(cap) {}
  AnomalySink(const AnomalySink&) = delete;
  AnomalySink& operator=(const AnomalySink&) = delete;

  void Flush() {
    for (size_t k = 0; k < kKinds; ++k) {
      if (dropped_[k] == 0) continue;
      auto kind = static_cast<AnomalyKind>(k);
      out_->push_back({kind, "", 0,
                       absl::StrFormat("%d more %s anomalies not listed", dropped_[k],
                                       AbslView(AnomalyKindName(kind))),
                       MustFlagByDefault(kind)});
      dropped_[k] = 0;
    }
  }

  void Add(AnomalyKind kind, std::string_view member, uint64_t offset, std::string message,
           std::optional<bool> must_flag = std::nullopt) {
    auto k = static_cast<size_t>(kind);
    if (count_[k]++ >= cap_) {
      ++dropped_[k];
      return;
    }
    out_->push_back({kind, std::string(member), offset, std::move(message),
                     must_flag.value_or(MustFlagByDefault(kind))});
  }

 private:
  static constexpr size_t kKinds = static_cast<size_t>(AnomalyKind::kCrcMismatch) + 1;
  std::vector<Anomaly>* out_;
  uint64_t cap_;
  std::array<uint64_t, kKinds> count_{};
  std::array<uint64_t, kKinds> dropped_{};
};

absl::Status Corrupt(uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("zip: %s (at byte offset %d)", AbslView(what), offset));
}

absl::Status EntryCorrupt(uint32_t index, std::string_view name, uint64_t offset,
                          std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("zip: central directory entry #%d %s: %s (at byte offset %d)", index,
                      AbslView(Quoted(name)), AbslView(what), offset));
}

absl::Status MemberError(const Entry& e, uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "zip member %s: %s (at byte offset %d)", AbslView(Quoted(e.name)), AbslView(what), offset));
}

absl::Status Limit(std::string_view limit, uint64_t value, uint64_t max, uint64_t offset,
                   std::string_view member = "") {
  return base::LimitError(
      absl::StrFormat("zip%s: %s is %d, over the limit %d (Limits::%s; at byte offset %d)",
                      member.empty() ? "" : absl::StrCat(" member ", Quoted(member)),
                      AbslView(limit), value, max, AbslView(limit), offset),
      limit, max);
}

// A reader over data[offset, offset + length), or an error naming `what`.
absl::StatusOr<ByteReader> At(std::string_view data, uint64_t offset, uint64_t length,
                              std::string_view what) {
  if (!RangeWithin(offset, length, data.size())) {
    return Corrupt(offset, absl::StrFormat("%s (%d bytes) runs past the end of the %d-byte file",
                                           AbslView(what), length, data.size()));
  }
  return ByteReader(data.substr(offset, length), offset);
}

bool SigAt(std::string_view data, uint64_t offset, std::string_view sig) {
  return RangeWithin(offset, sig.size(), data.size()) && data.substr(offset, sig.size()) == sig;
}

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

// --- the end record --------------------------------------------------------------------------

struct EndRecord {
  uint64_t eocd_offset = 0;
  uint64_t comment_length = 0;
  bool zip64 = false;
  uint64_t zip64_offset = 0;
  uint64_t zip64_record_size = 0;
  uint64_t total_entries = 0;
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  uint32_t num_this_disk = 0;
};

// mz_zip_reader_locate_header_sig: the highest offset in the searched window holding the
// signature with at least 22 bytes after it. Also returns the lowest offset searched.
std::pair<std::optional<uint64_t>, uint64_t> FindEocd(std::string_view data) {
  const uint64_t size = data.size();
  if (size < kEocdSize) return {std::nullopt, 0};
  uint64_t lowest = size > kEocdSearchBlock ? size - kEocdSearchBlock : 0;
  while (lowest != 0 && size - lowest < kEocdSearchSpan) {
    lowest = lowest > kEocdSearchBlock - 3 ? lowest - (kEocdSearchBlock - 3) : 0;
  }
  for (uint64_t o = size - kEocdSize;; --o) {
    if (data.substr(o, 4) == kEocdSig) return {o, lowest};
    if (o == lowest) break;
  }
  return {std::nullopt, lowest};
}

absl::StatusOr<EndRecord> ReadEndRecord(std::string_view data, AnomalySink& anomalies) {
  const uint64_t size = data.size();
  if (size < kEocdSize) {
    return Corrupt(0, absl::StrFormat("not a zip archive: %d bytes, fewer than the 22-byte end "
                                      "of central directory record",
                                      size));
  }
  auto [eocd, lowest] = FindEocd(data);
  if (!eocd) {
    return Corrupt(lowest, absl::StrFormat("no end of central directory record between byte "
                                           "offset %d and the end (%d bytes), where miniz "
                                           "searches",
                                           lowest, size));
  }
  EndRecord end;
  end.eocd_offset = *eocd;
  uint64_t others = 0, first_other = 0;
  for (uint64_t o = lowest; o < *eocd; ++o) {
    if (data.substr(o, 4) == kEocdSig) {
      if (others++ == 0) first_other = o;
    }
  }
  if (others > 0) {
    anomalies.Add(AnomalyKind::kMultipleEocd, "", first_other,
                  absl::StrFormat("%d more end-record signature(s) before the one miniz uses at "
                                  "byte offset %d, the first at %d",
                                  others, *eocd, first_other));
  }

  CKPT_ASSIGN_OR_RETURN(ByteReader r, At(data, *eocd, kEocdSize, "end of central directory"));
  CKPT_RETURN_IF_ERROR(r.Skip(4));
  uint16_t num_this_disk = *r.ReadU16LE();
  uint16_t cd_disk = *r.ReadU16LE();
  uint16_t entries_on_disk = *r.ReadU16LE();
  uint16_t total_entries = *r.ReadU16LE();
  uint32_t cd_size = *r.ReadU32LE();
  uint32_t cd_offset = *r.ReadU32LE();
  end.comment_length = *r.ReadU16LE();

  // ZIP64: a locator right before the end record, pointing at the ZIP64 end record.
  ByteReader z64(std::string_view(), 0);
  uint32_t z64_total_disks = 0;
  if (*eocd >= kZip64LocatorSize + kZip64EocdSize &&
      SigAt(data, *eocd - kZip64LocatorSize, kZip64LocatorSig)) {
    const uint64_t loc = *eocd - kZip64LocatorSize;
    CKPT_ASSIGN_OR_RETURN(ByteReader lr, At(data, loc, kZip64LocatorSize, "ZIP64 locator"));
    CKPT_RETURN_IF_ERROR(lr.Skip(8));
    uint64_t z64_offset = *lr.ReadU64LE();
    z64_total_disks = *lr.ReadU32LE();
    if (z64_offset > size - kZip64EocdSize) {
      return Corrupt(loc, absl::StrFormat("not a zip archive: the ZIP64 locator points at byte "
                                          "offset %d, past the last 56 bytes",
                                          z64_offset));
    }
    if (SigAt(data, z64_offset, kZip64EocdSig)) {
      end.zip64 = true;
      end.zip64_offset = z64_offset;
      z64 = *At(data, z64_offset, kZip64EocdSize, "ZIP64 end record");
    } else {
      anomalies.Add(AnomalyKind::kZip64Mismatch, "", z64_offset,
                    absl::StrFormat("the ZIP64 locator at byte offset %d points at %d, which holds "
                                    "no ZIP64 end record; ignored, as miniz does",
                                    loc, z64_offset));
    }
  }

  uint64_t entries = total_entries, on_disk = entries_on_disk;
  uint64_t this_disk = num_this_disk, dir_disk = cd_disk;
  end.cd_size = cd_size;
  end.cd_offset = cd_offset;
  if (end.zip64) {
    CKPT_RETURN_IF_ERROR(z64.Skip(4));
    end.zip64_record_size = *z64.ReadU64LE();
    CKPT_RETURN_IF_ERROR(z64.Skip(4));
    uint32_t z_this_disk = *z64.ReadU32LE();
    uint32_t z_dir_disk = *z64.ReadU32LE();
    uint64_t z_on_disk = *z64.ReadU64LE();
    uint64_t z_entries = *z64.ReadU64LE();
    uint64_t z_cd_size = *z64.ReadU64LE();
    uint64_t z_cd_offset = *z64.ReadU64LE();
    const uint64_t at = end.zip64_offset;
    if (end.zip64_record_size < kZip64EocdSize - 12) {
      return Corrupt(at, absl::StrFormat("ZIP64 end record declares %d bytes, fewer than 44",
                                         end.zip64_record_size));
    }
    if (z64_total_disks != 1) {
      return Corrupt(at, absl::StrFormat("multi-disk archive: the ZIP64 locator says %d disks",
                                         z64_total_disks));
    }
    if (z_entries > 0xFFFFFFFFull || z_on_disk > 0xFFFFFFFFull) {
      return Corrupt(at, absl::StrFormat("ZIP64 end record claims %d entries", z_entries));
    }
    if (z_cd_size > 0xFFFFFFFFull) {
      return Corrupt(at, absl::StrFormat("ZIP64 central directory of %d bytes (miniz's limit is "
                                         "4 GiB)",
                                         z_cd_size));
    }
    // end.eocd_offset, not the structured binding `eocd`: clang before 16 cannot capture a
    // structured binding in a lambda (a C++20 feature), and the fuzz/sanitizer builds use clang.
    auto differs = [&](std::string_view field, uint64_t small, uint64_t sentinel, uint64_t big) {
      if (small != sentinel && small != big) {
        anomalies.Add(AnomalyKind::kZip64Mismatch, "", end.eocd_offset,
                      absl::StrFormat("the end record says %s %d, the ZIP64 record %d; miniz "
                                      "uses the ZIP64 value",
                                      AbslView(field), small, big));
      }
    };
    differs("entry count", total_entries, 0xFFFF, z_entries);
    differs("central directory size", cd_size, kU32Sentinel, z_cd_size);
    differs("central directory offset", cd_offset, kU32Sentinel, z_cd_offset);
    entries = z_entries;
    on_disk = z_on_disk;
    end.cd_size = z_cd_size;
    this_disk = z_this_disk;
    dir_disk = z_dir_disk;
    end.cd_offset = z_cd_offset;
  }
  if (entries != on_disk) {
    return Corrupt(*eocd, absl::StrFormat("multi-disk archive: %d entries in total, %d on this "
                                          "disk",
                                          entries, on_disk));
  }
  if ((this_disk | dir_disk) != 0 && (this_disk != 1 || dir_disk != 1)) {
    return Corrupt(*eocd, absl::StrFormat("multi-disk archive: this disk %d, directory on disk %d",
                                          this_disk, dir_disk));
  }
  end.total_entries = entries;
  end.num_this_disk = static_cast<uint32_t>(this_disk);
  return end;
}

// --- the central directory -------------------------------------------------------------------

struct RawEntry {
  Entry entry;
  uint16_t cd_extra_length = 0;
  std::string_view cd_extra;
};

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

// --- miniz's sorted directory ----------------------------------------------------------------

// mz_zip_reader_filename_less.
bool FilenameLess(std::string_view l, std::string_view r) {
  size_t n = std::min(l.size(), r.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char a = MzToLower(static_cast<unsigned char>(l[i]));
    unsigned char b = MzToLower(static_cast<unsigned char>(r[i]));
    if (a != b) return a < b;
  }
  return l.size() < r.size();
}

// mz_zip_filename_compare: <0, 0, >0.
int FilenameCompare(std::string_view l, std::string_view r) {
  size_t n = std::min(l.size(), r.size());
  for (size_t i = 0; i < n; ++i) {
    int a = MzToLower(static_cast<unsigned char>(l[i]));
    int b = MzToLower(static_cast<unsigned char>(r[i]));
    if (a != b) return a - b;
  }
  return l.size() < r.size() ? -1 : (l.size() > r.size() ? 1 : 0);
}

// mz_zip_reader_sort_central_dir_offsets_by_filename: an in-place heap sort (not stable; which of
// two equal names ends up where is decided here, step for step as miniz does it).
std::vector<uint32_t> MinizSortedOrder(const std::vector<Entry>& entries) {
  const uint64_t size = entries.size();
  std::vector<uint32_t> idx(size);
  for (uint32_t i = 0; i < size; ++i) idx[i] = i;
  if (size <= 1) return idx;
  auto less = [&](uint32_t a, uint32_t b) {
    return FilenameLess(entries[a].name, entries[b].name);
  };
  auto sift = [&](uint64_t root, uint64_t end) {
    for (;;) {
      uint64_t child = root * 2 + 1;
      if (child >= end) break;
      if (child + 1 < end && less(idx[child], idx[child + 1])) ++child;
      if (!less(idx[root], idx[child])) break;
      std::swap(idx[root], idx[child]);
      root = child;
    }
  };
  for (uint64_t start = (size - 2) >> 1;; --start) {
    sift(start, size);
    if (start == 0) break;
  }
  for (uint64_t end = size - 1; end > 0; --end) {
    std::swap(idx[end], idx[0]);
    sift(0, end);
  }
  return idx;
}

// --- inflate ---------------------------------------------------------------------------------

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

bool IsDirectory(const Entry& e) {
  return (!e.name.empty() && e.name.back() == '/') ||
         (e.external_attributes & kDosDirectoryAttribute) != 0;
}

bool LooksLikeZip(std::string_view bytes) {
  return bytes.substr(0, 4) == kLocalSig || bytes.substr(0, 4) == kEocdSig;
}

// --- structural checks after Open ------------------------------------------------------------

struct Span {
  uint64_t begin;
  uint64_t end;
  std::string what;
  std::string member;
};

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
    auto size_ok = [&](uint32_t local, uint64_t cd) {
      return local == cd || (zip64_sizes && local == kU32Sentinel);
    };
    const bool zeros = lcrc == 0 && lcomp == 0 && luncomp == 0;
    if (!((e.local_flags & kFlagDescriptor) && zeros) &&
        !(lcrc == e.crc32 && size_ok(lcomp, e.compressed_size) &&
          size_ok(luncomp, e.uncompressed_size))) {
      diffs.push_back(absl::StrFormat("CRC/sizes %08x/%d/%d vs %08x/%d/%d", lcrc, lcomp, luncomp,
                                      e.crc32, e.compressed_size, e.uncompressed_size));
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
      const bool wide = zip64_sizes;
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

void CheckEntries(std::string_view data, const std::vector<Entry>& entries, std::string_view prefix,
                  bool torch_names,
                  AnomalySink& anomalies) {
  const std::string prefix_slash = absl::StrCat(AbslView(prefix), "/");
  for (const Entry& e : entries) {
    if (!e.stat_error.empty()) {
      anomalies.Add(AnomalyKind::kMalformedExtraField, e.name, e.cd_header_offset,
                    absl::StrCat("miniz cannot stat this entry: ", e.stat_error));
    }
    for (auto [flags, where] :
         {std::pair{e.cd_flags, "central directory"}, std::pair{e.local_flags, "local header"}}) {
      uint16_t odd = flags & ~kFlagsTorchMayWrite;
      if (odd == 0) continue;
      std::string what;
      if (odd & kFlagEncrypted) what += " encrypted (0x1);";
      if (odd & kFlagPatch) what += " patch data (0x20);";
      if (odd & kFlagStrongEncryption) what += " strong encryption (0x40);";
      if (odd & kFlagMaskedLocalHeader) what += " masked local header (0x2000);";
      anomalies.Add(
          AnomalyKind::kUnusualFlags, e.name,
          std::string_view(where) == "local header" ? e.local_header_offset : e.cd_header_offset,
          absl::StrFormat("%s flags 0x%04x: bits 0x%04x set that torch never writes;%s "
                          "miniz checks only the central directory's",
                          where, flags, odd, what));
    }
    if (e.method == kMethodDeflate) {
      anomalies.Add(AnomalyKind::kDeflated, e.name, e.cd_header_offset,
                    "DEFLATE member; torch.save writes only STORED ones");
    } else if (e.method != kMethodStored) {
      anomalies.Add(
          AnomalyKind::kUnsupportedMethod, e.name, e.cd_header_offset,
          absl::StrFormat("compression method %d: torch (miniz) cannot read it", e.method));
    }
    if (e.method == kMethodStored && e.compressed_size != e.uncompressed_size) {
      anomalies.Add(AnomalyKind::kSizeMismatch, e.name, e.cd_header_offset,
                    absl::StrFormat("STORED with %d compressed and %d uncompressed bytes; torch "
                                    "reads %d bytes",
                                    e.compressed_size, e.uncompressed_size, e.uncompressed_size));
    }
    if (IsDirectory(e)) {
      const bool sized = e.compressed_size != 0 || e.uncompressed_size != 0;
      anomalies.Add(AnomalyKind::kDirectoryEntry, e.name, e.cd_header_offset,
                    sized ? "directory entry with a size: miniz extracts nothing and torch "
                            "would read an uninitialised buffer"
                          : "directory entry (torch.save writes none)",
                    sized);
    }
    if (e.local_header_ok && e.method == kMethodStored &&
        RangeWithin(e.data_offset, e.uncompressed_size, data.size()) &&
        LooksLikeZip(data.substr(e.data_offset, std::min<uint64_t>(e.uncompressed_size, 4)))) {
      anomalies.Add(AnomalyKind::kNestedArchive, e.name, e.data_offset,
                    "the member's bytes are a zip archive");
    }
    // Names.
    std::string_view name = e.name;
    std::string odd;
    if (name.find('\0') != std::string_view::npos) odd += " NUL byte;";
    if (std::any_of(name.begin(), name.end(), [](char c) {
          return (static_cast<unsigned char>(c) < 0x20 && c != '\0') || c == 0x7f;
        })) {
      odd += " control character;";
    }
    if (name.find('\\') != std::string_view::npos) odd += " backslash;";
    if (!name.empty() && name[0] == '/') odd += " leading '/';";
    if (name == ".." || name.find("../") == 0 || name.find("/../") != std::string_view::npos ||
        (name.size() >= 3 && name.substr(name.size() - 3) == "/..")) {
      odd += " '..' component;";
    }
    if (!odd.empty()) {
      odd.pop_back();
      anomalies.Add(AnomalyKind::kOddName, e.name, e.cd_header_offset,
                    absl::StrCat("name ", Quoted(name), " has:", odd));
    }
    // getAllRecords: the name as a C string in a 512-byte buffer.
    std::string_view as_torch = CString(name).substr(0, kTorchNameBuffer - 1);
    if (!torch_names) {
      // Python's zipfile: no archive folder, no case folding, no constants.pkl dispatch.
    } else if (as_torch.substr(0, prefix_slash.size()) != prefix_slash) {
      anomalies.Add(AnomalyKind::kNameOutsidePrefix, e.name, e.cd_header_offset,
                    absl::StrFormat("not under the archive folder %s taken from the first "
                                    "entry: torch.load's get_all_records() throws",
                                    AbslView(Quoted(prefix_slash))));
    } else {
      std::string_view record = as_torch.substr(prefix_slash.size());
      if (record == "constants.pkl") {
        anomalies.Add(AnomalyKind::kTorchScriptMarker, e.name, e.cd_header_offset,
                      "a constants.pkl record: torch.load hands the file to torch.jit.load "
                      "(TorchScript)");
      }
      std::string_view rest = name.substr(prefix_slash.size());
      if (std::any_of(rest.begin(), rest.end(),
                      [](char c) { return IsUpper(static_cast<unsigned char>(c)); })) {
        anomalies.Add(AnomalyKind::kUppercaseName, e.name, e.cd_header_offset,
                      "upper-case letters in the record name; torch's lookup ignores ASCII case");
      }
    }
  }
}

void CheckNameCollisions(const std::vector<Entry>& entries, const Archive& archive,
                         AnomalySink& anomalies) {
  std::vector<std::pair<std::string, uint32_t>> folded;
  folded.reserve(entries.size());
  for (const Entry& e : entries) folded.emplace_back(MzLowerCopy(e.name), e.index);
  std::sort(folded.begin(), folded.end());
  for (size_t i = 0; i < folded.size();) {
    size_t j = i + 1;
    while (j < folded.size() && folded[j].first == folded[i].first) ++j;
    if (j - i > 1) {
      const Entry* winner = archive.Locate(entries[folded[i].second].name);
      std::string who = winner ? absl::StrFormat("entry #%d", winner->index) : "none";
      for (size_t k = i + 1; k < j; ++k) {
        const Entry& e = entries[folded[k].second];
        const Entry& first = entries[folded[i].second];
        const bool exact = e.name == first.name;
        anomalies.Add(exact ? AnomalyKind::kDuplicateName : AnomalyKind::kCaseCollision, e.name,
                      e.cd_header_offset,
                      absl::StrFormat("%s of entry #%d %s (entry #%d here); torch's lookup "
                                      "resolves %s to %s",
                                      exact ? "duplicate name" : "same name up to ASCII case as",
                                      first.index, AbslView(Quoted(first.name)), e.index,
                                      AbslView(Quoted(first.name)), who));
      }
    }
    i = j;
  }
}

void CheckCoverage(std::string_view data, std::vector<Span> spans, AnomalySink& anomalies) {
  const uint64_t size = data.size();
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  uint64_t covered = 0;  // end of the furthest-reaching span so far
  const Span* owner = nullptr;
  for (const Span& s : spans) {
    if (s.begin < covered && owner != nullptr) {
      anomalies.Add(
          AnomalyKind::kOverlap, s.member, s.begin,
          absl::StrFormat("%s %s [%d, %d) overlaps %s %s, which runs to %d", AbslView(s.what),
                          AbslView(Quoted(s.member)), s.begin, s.end, AbslView(owner->what),
                          AbslView(Quoted(owner->member)), covered));
    } else if (s.begin > covered) {
      std::string_view hole = data.substr(covered, s.begin - covered);
      if (covered == 0 && hole.substr(0, 4) != kLocalSig) {
        anomalies.Add(AnomalyKind::kPrependedData, "", 0,
                      absl::StrFormat("%d bytes before the first member (a file that is another "
                                      "format followed by a zip)",
                                      hole.size()));
      } else {
        size_t sig = hole.find(kLocalSig);
        anomalies.Add(AnomalyKind::kGap, "", covered,
                      absl::StrFormat("%d bytes [%d, %d) referenced by nothing%s", hole.size(),
                                      covered, s.begin,
                                      sig == std::string_view::npos
                                          ? ""
                                          : absl::StrFormat(", with a local header signature at "
                                                            "byte offset %d",
                                                            covered + sig)));
      }
    }
    if (s.end > covered) {
      covered = s.end;
      owner = &s;
    }
  }
  if (covered < size) {
    anomalies.Add(AnomalyKind::kAppendedData, "", covered,
                  absl::StrFormat("%d bytes after the end of the archive", size - covered));
  }
}

}  // namespace

std::string_view AnomalyKindName(AnomalyKind kind) {
  switch (kind) {
    case AnomalyKind::kPrependedData:
      return "kPrependedData";
    case AnomalyKind::kAppendedData:
      return "kAppendedData";
    case AnomalyKind::kArchiveComment:
      return "kArchiveComment";
    case AnomalyKind::kMultipleEocd:
      return "kMultipleEocd";
    case AnomalyKind::kZip64Mismatch:
      return "kZip64Mismatch";
    case AnomalyKind::kCentralDirectorySlack:
      return "kCentralDirectorySlack";
    case AnomalyKind::kGap:
      return "kGap";
    case AnomalyKind::kOverlap:
      return "kOverlap";
    case AnomalyKind::kDuplicateName:
      return "kDuplicateName";
    case AnomalyKind::kCaseCollision:
      return "kCaseCollision";
    case AnomalyKind::kUppercaseName:
      return "kUppercaseName";
    case AnomalyKind::kOddName:
      return "kOddName";
    case AnomalyKind::kNameOutsidePrefix:
      return "kNameOutsidePrefix";
    case AnomalyKind::kTorchScriptMarker:
      return "kTorchScriptMarker";
    case AnomalyKind::kUnusualFlags:
      return "kUnusualFlags";
    case AnomalyKind::kUnsupportedMethod:
      return "kUnsupportedMethod";
    case AnomalyKind::kLocalHeaderMismatch:
      return "kLocalHeaderMismatch";
    case AnomalyKind::kBadLocalHeader:
      return "kBadLocalHeader";
    case AnomalyKind::kMalformedExtraField:
      return "kMalformedExtraField";
    case AnomalyKind::kDataDescriptorMismatch:
      return "kDataDescriptorMismatch";
    case AnomalyKind::kSizeMismatch:
      return "kSizeMismatch";
    case AnomalyKind::kDirectoryEntry:
      return "kDirectoryEntry";
    case AnomalyKind::kNestedArchive:
      return "kNestedArchive";
    case AnomalyKind::kDeflated:
      return "kDeflated";
    case AnomalyKind::kInflateMismatch:
      return "kInflateMismatch";
    case AnomalyKind::kCrcMismatch:
      return "kCrcMismatch";
  }
  return "kUnknown";
}

absl::StatusOr<Archive> Archive::Open(std::string_view data, const Limits& limits, Mode mode) {
  Archive ar;
  ar.data_ = data;
  ar.limits_ = limits;
  ar.starts_with_local_header_ = data.substr(0, 4) == kLocalSig;
  std::vector<Anomaly> found;
  {
    AnomalySink anomalies(&found, limits.max_anomalies_per_kind);
    CKPT_ASSIGN_OR_RETURN(EndRecord end, ReadEndRecord(data, anomalies));
    CKPT_ASSIGN_OR_RETURN(std::vector<RawEntry> raws,
                          ReadCentralDirectory(data, end, limits, anomalies));
    ar.entries_.reserve(raws.size());
    for (const RawEntry& r : raws) ar.entries_.push_back(r.entry);
    ar.sorted_ = MinizSortedOrder(ar.entries_);

    // PyTorchStreamReader's constructor: the archive folder from the first entry.
    if (ar.entries_.empty()) {
      return Corrupt(end.eocd_offset, "archive does not contain any files");
    }
    const Entry& first = ar.entries_[0];
    size_t slash = mode == Mode::kZipfile ? 0 : first.name.find('/');
    if (slash == std::string::npos) {
      return Corrupt(
          first.cd_header_offset,
          absl::StrCat("file in archive is not in a subdirectory: ", Quoted(first.name)));
    }
    ar.prefix_ = first.name.substr(0, slash);
    if (ar.prefix_.find('\0') != std::string::npos) {
      return Corrupt(first.cd_header_offset,
                     absl::StrCat("the archive folder ", Quoted(ar.prefix_),
                                  " contains a NUL byte: torch would look every record up "
                                  "under a truncated name; refused"));
    }

    std::vector<Span> spans;
    CheckLocalHeaders(data, raws, ar.entries_, spans, anomalies);
    CheckEntries(data, ar.entries_, ar.prefix_, mode == Mode::kTorch, anomalies);
    CheckNameCollisions(ar.entries_, ar, anomalies);

    spans.push_back({end.cd_offset, end.cd_offset + end.cd_size, "central directory", ""});
    if (end.zip64) {
      uint64_t z64_end = 0;
      if (!CheckedAdd<uint64_t>(end.zip64_offset, 12 + end.zip64_record_size, &z64_end) ||
          z64_end > data.size()) {
        z64_end = data.size();
      }
      spans.push_back({end.zip64_offset, z64_end, "ZIP64 end record", ""});
    }
    if (end.eocd_offset >= kZip64LocatorSize &&
        SigAt(data, end.eocd_offset - kZip64LocatorSize, kZip64LocatorSig)) {
      spans.push_back({end.eocd_offset - kZip64LocatorSize, end.eocd_offset, "ZIP64 locator", ""});
    }
    uint64_t eocd_end = end.eocd_offset + kEocdSize + end.comment_length;
    if (end.comment_length != 0) {
      anomalies.Add(AnomalyKind::kArchiveComment, "", end.eocd_offset + kEocdSize,
                    absl::StrFormat("archive comment of %d bytes%s", end.comment_length,
                                    eocd_end > data.size() ? ", running past the end" : ""),
                    eocd_end > data.size() ? std::optional<bool>(true) : std::nullopt);
    }
    spans.push_back({end.eocd_offset, std::min<uint64_t>(eocd_end, data.size()),
                     "end of central directory", ""});
    CheckCoverage(data, std::move(spans), anomalies);
    anomalies.Flush();
  }
  ar.anomalies_ = std::move(found);
  return ar;
}

const Entry* Archive::Locate(std::string_view name) const {
  const std::string_view query = CString(name);
  int64_t lo = 0, hi = static_cast<int64_t>(sorted_.size()) - 1;
  while (lo <= hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    const Entry& e = entries_[sorted_[mid]];
    int cmp = FilenameCompare(e.name, query);
    if (cmp == 0) return &e;
    if (cmp < 0) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return nullptr;
}

const Entry* Archive::LocateRecord(std::string_view record) const {
  return Locate(absl::StrCat(prefix_, "/", AbslView(record)));
}

absl::StatusOr<Member> Archive::Read(const Entry& e) const {
  return ReadEntry(data_, e, limits_);
}

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

absl::StatusOr<Member> Archive::ReadRecord(std::string_view record) const {
  const Entry* e = LocateRecord(record);
  if (e == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zip: file not found: ", Quoted(absl::StrCat(prefix_, "/", AbslView(record)))));
  }
  return Read(*e);
}

absl::StatusOr<uint64_t> Archive::Version() const {
  const Entry* e = LocateRecord(".data/version");
  if (e == nullptr) e = LocateRecord("version");
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("zip: no version record (", Quoted(absl::StrCat(prefix_, "/version")), ")"));
  }
  CKPT_ASSIGN_OR_RETURN(Member m, Read(*e));
  if (!m.complete()) {
    return MemberError(*e, e->cd_header_offset,
                       "torch would parse the version from uninitialised memory");
  }
  // std::stoull over a C string: blanks, an optional sign, decimal digits.
  std::string_view s = CString(m.bytes());
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) {
    if (!CheckedMul<uint64_t>(v, 10, &v) || !CheckedAdd<uint64_t>(v, s[i] - '0', &v)) {
      return MemberError(*e, e->data_offset, "version out of range");
    }
  }
  if (digits == 0) {
    return MemberError(*e, e->data_offset,
                       absl::StrCat("couldn't parse the version ", Quoted(s), " as a number"));
  }
  if (negative) v = 0 - v;  // strtoull negates in unsigned arithmetic
  if (v < kMinSupportedVersion || v > kMaxSupportedVersion) {
    return MemberError(*e, e->data_offset,
                       absl::StrFormat("version %d outside the supported [%d, %d]", v,
                                       kMinSupportedVersion, kMaxSupportedVersion));
  }
  return v;
}

absl::StatusOr<std::vector<std::string>> Archive::AllRecords() const {
  const std::string prefix_slash = absl::StrCat(prefix_, "/");
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) {
    std::string_view name = CString(e.name).substr(0, kTorchNameBuffer - 1);
    if (name.substr(0, prefix_slash.size()) != prefix_slash) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "zip: file in archive is not in a subdirectory %s: %s (entry #%d at byte offset %d)",
          AbslView(Quoted(prefix_slash)), AbslView(Quoted(name)), e.index, e.cd_header_offset));
    }
    out.emplace_back(name.substr(prefix_slash.size()));
  }
  return out;
}

}  // namespace ckptscan::zip
