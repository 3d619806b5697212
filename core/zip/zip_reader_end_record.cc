// The end of the archive as miniz finds it: the backwards search for the end of central directory
// record (which of several wins, what lies before it), then the ZIP64 locator and ZIP64 end record
// and miniz's checks on them. Its result says where the central directory is.
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip::internal {
namespace {

using base::AbslView;
using base::ByteReader;
using base::RangeWithin;
using records::kEocdSig;
using records::kEocdSize;
using records::kU32Sentinel;
using records::kZip64EocdSig;
using records::kZip64EocdSize;
using records::kZip64LocatorSig;
using records::kZip64LocatorSize;

// miniz searches for the end record in 4 KiB blocks, backwards, and gives up once a block starts
// 0xFFFF + 22 bytes or more before the end (the largest comment plus the record).
constexpr uint64_t kEocdSearchBlock = 4096;
constexpr uint64_t kEocdSearchSpan = 0xFFFF + kEocdSize;

// A reader over data[offset, offset + length), or an error naming `what`.
absl::StatusOr<ByteReader> At(std::string_view data, uint64_t offset, uint64_t length,
                              std::string_view what) {
  if (!RangeWithin(offset, length, data.size())) {
    return Corrupt(offset, absl::StrFormat("%s (%d bytes) runs past the end of the %d-byte file",
                                           AbslView(what), length, data.size()));
  }
  return ByteReader(data.substr(offset, length), offset);
}

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

}  // namespace

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

}  // namespace ckptscan::zip::internal
