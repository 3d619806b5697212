#include "core/zip/zipfile_view.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/json_text.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/zip/records.h"

namespace ckptscan::zip {
namespace {


constexpr uint64_t kMaxCommentSpan = (1u << 16) + records::kEocdSize;  // zipfile: 1 << 16, not 0xFFFF
constexpr uint16_t kMaxExtractVersion = 63;

absl::Status Limit(std::string_view limit, uint64_t value, uint64_t max, uint64_t offset) {
  return base::LimitError(
      absl::StrFormat("zipfile: %s is %d, over the limit %d (Limits::%s; at byte offset %d)",
                      base::AbslView(limit), value, max, base::AbslView(limit), offset),
      limit, max);
}

absl::Status BadZip(uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("zipfile: %s (byte offset %d)", base::AbslView(what), offset));
}

uint16_t U16(std::string_view b, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(b[at]) |
                               (static_cast<unsigned char>(b[at + 1]) << 8));
}
uint32_t U32(std::string_view b, size_t at) {
  return static_cast<uint32_t>(U16(b, at)) | (static_cast<uint32_t>(U16(b, at + 2)) << 16);
}
uint64_t U64(std::string_view b, size_t at) {
  return static_cast<uint64_t>(U32(b, at)) | (static_cast<uint64_t>(U32(b, at + 4)) << 32);
}

// Python's slicing: data[from:from + n], cut at the end, empty past it.
std::string_view Slice(std::string_view data, uint64_t from, uint64_t n) {
  if (from >= data.size()) return {};
  return data.substr(from, std::min<uint64_t>(n, data.size() - from));
}

bool IsAscii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

// ZipInfo._decodeExtra: each ZIP64 field replaces the value that is at its sentinel, in order.
absl::Status DecodeExtra(std::string_view extra, uint64_t at, Entry* e) {
  while (extra.size() >= 4) {
    const uint16_t tp = U16(extra, 0);
    const uint16_t ln = U16(extra, 2);
    if (static_cast<uint64_t>(ln) + 4 > extra.size()) {
      return BadZip(at, absl::StrFormat("corrupt extra field %04x (size=%d)", tp, ln));
    }
    if (tp == 0x0001) {
      std::string_view d = extra.substr(4, ln);
      auto take = [&d](uint64_t* v) {
        if (d.size() < 8) return false;
        *v = U64(d, 0);
        d.remove_prefix(8);
        return true;
      };
      if ((e->uncompressed_size == 0xFFFFFFFFu || e->uncompressed_size == ~uint64_t{0}) &&
          !take(&e->uncompressed_size)) {
        return BadZip(at, "corrupt zip64 extra field: file size not found");
      }
      if (e->compressed_size == 0xFFFFFFFFu && !take(&e->compressed_size)) {
        return BadZip(at, "corrupt zip64 extra field: compress size not found");
      }
      if (e->local_header_offset == 0xFFFFFFFFu && !take(&e->local_header_offset)) {
        return BadZip(at, "corrupt zip64 extra field: header offset not found");
      }
    }
    extra.remove_prefix(static_cast<size_t>(ln) + 4);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ZipfileDirectory> ReadZipfileDirectory(std::string_view data,
                                                      const Limits& limits) {
  const uint64_t size = data.size();
  if (size < records::kEocdSize) return BadZip(0, "file is not a zip file");
  // _EndRecData: the last 22 bytes when they are an end record without a comment, else the
  // last signature in the last 64 KiB + 22 bytes (whatever its comment length says).
  uint64_t eocd = 0;
  const std::string_view last = data.substr(size - records::kEocdSize);
  if (last.substr(0, 4) == records::kEocdSig && U16(last, 20) == 0) {
    eocd = size - records::kEocdSize;
  } else {
    const uint64_t window = size > kMaxCommentSpan ? size - kMaxCommentSpan : 0;
    const size_t found = data.substr(window).rfind(records::kEocdSig);
    if (found == std::string_view::npos) return BadZip(0, "file is not a zip file");
    eocd = window + found;
    if (size - eocd < records::kEocdSize) return BadZip(eocd, "file is not a zip file (truncated end record)");
  }
  const std::string_view rec = data.substr(eocd, records::kEocdSize);
  uint64_t cd_size = U32(rec, 12);
  uint64_t cd_offset = U32(rec, 16);

  ZipfileDirectory out;
  // _EndRecData64: a locator right before the end record, then a ZIP64 end record right before
  // the locator (where the locator points does not matter).
  if (eocd >= records::kZip64LocatorSize) {
    const std::string_view loc = data.substr(eocd - records::kZip64LocatorSize, records::kZip64LocatorSize);
    if (loc.substr(0, 4) == records::kZip64LocatorSig) {
      const uint32_t diskno = U32(loc, 4);
      const uint32_t disks = U32(loc, 16);
      if (diskno != 0 || disks > 1) {
        return BadZip(eocd - records::kZip64LocatorSize,
                      "zipfiles that span multiple disks are not supported");
      }
      if (eocd >= records::kZip64LocatorSize + records::kZip64EocdSize) {
        const uint64_t at = eocd - records::kZip64LocatorSize - records::kZip64EocdSize;
        const std::string_view z = data.substr(at, records::kZip64EocdSize);
        if (z.substr(0, 4) == records::kZip64EocdSig) {
          out.zip64 = true;
          cd_size = U64(z, 40);
          cd_offset = U64(z, 48);
        }
      }
    }
  }
  // _RealGetContents: offsets shift by concat; entries are read until cd_size bytes are used.
  __int128 concat = static_cast<__int128>(eocd) - cd_size - cd_offset;
  if (out.zip64) concat -= records::kZip64EocdSize + records::kZip64LocatorSize;
  const __int128 start_dir = static_cast<__int128>(cd_offset) + concat;
  if (start_dir < 0) return BadZip(eocd, "bad offset for central directory");
  if (cd_size > limits.max_central_directory_bytes) {
    return Limit("max_central_directory_bytes", cd_size, limits.max_central_directory_bytes, eocd);
  }
  out.concat = static_cast<int64_t>(concat);
  const uint64_t dir_at =
      start_dir > static_cast<__int128>(size) ? size : static_cast<uint64_t>(start_dir);
  const std::string_view dir = Slice(data, dir_at, cd_size);
  std::map<std::string, size_t, std::less<>> by_name;
  uint64_t total = 0;
  uint64_t pos = 0;  // in `dir`, as the BytesIO over it reads
  uint64_t total_uncompressed = 0;  // bounds the work of reading every member (overlaps)
  while (total < cd_size) {
    const uint64_t at = dir_at + pos;
    if (dir.size() - pos < records::kCdHeaderSize) return BadZip(at, "truncated central directory");
    const std::string_view h = dir.substr(pos, records::kCdHeaderSize);
    if (h.substr(0, 4) != records::kCdSig) return BadZip(at, "bad magic number for central directory");
    if (out.entries.size() >= limits.max_entries) {
      return Limit("max_entries", out.entries.size() + 1, limits.max_entries, at);
    }
    const uint16_t name_len = U16(h, 28), extra_len = U16(h, 30), comment_len = U16(h, 32);
    pos += records::kCdHeaderSize;
    // BytesIO.read: short reads at the end are silent.
    const std::string_view raw_name = Slice(dir, pos, name_len);
    if (raw_name.size() > limits.max_name_bytes) {
      return Limit("max_name_bytes", raw_name.size(), limits.max_name_bytes, at);
    }
    pos += raw_name.size();
    const std::string_view extra = Slice(dir, pos, extra_len);
    pos += extra.size();
    pos += Slice(dir, pos, comment_len).size();
    Entry e;
    e.index = static_cast<uint32_t>(out.entries.size());
    e.cd_header_offset = at;
    e.cd_flags = U16(h, 8);
    const uint8_t extract_version = static_cast<uint8_t>(h[6]);  // one byte; then "reserved"
    if (extract_version > kMaxExtractVersion) {
      return BadZip(at, absl::StrFormat("zip file version %.1f", extract_version / 10.0));
    }
    if ((e.cd_flags & records::kFlagUtf8) != 0 && !base::IsValidUtf8(raw_name)) {
      return BadZip(at, "a UTF-8 flagged name that is not UTF-8");
    }
    e.method = U16(h, 10);
    e.dos_time = U16(h, 12);
    e.crc32 = U32(h, 16);
    e.compressed_size = U32(h, 20);
    e.uncompressed_size = U32(h, 24);
    e.external_attributes = U32(h, 38);
    e.local_header_offset = U32(h, 42);
    CKPT_RETURN_IF_ERROR(DecodeExtra(extra, at, &e));
    if (!base::CheckedAdd(total_uncompressed, e.uncompressed_size, &total_uncompressed) ||
        total_uncompressed > limits.max_total_uncompressed) {
      return Limit("max_total_uncompressed", total_uncompressed, limits.max_total_uncompressed, at);
    }
    const __int128 lho = static_cast<__int128>(e.local_header_offset) + concat;
    // ZipInfo: the name ends at its first NUL; ZipFile.open compares the whole one.
    const size_t nul = raw_name.find('\0');
    e.name = std::string(nul == std::string_view::npos ? raw_name : raw_name.substr(0, nul));
    e.local_header_offset = lho < 0 ? ~uint64_t{0} : static_cast<uint64_t>(lho);
    // ZipFile.open: the local header's signature, and its name equal to the directory's.
    if (lho >= 0 && base::RangeWithin(e.local_header_offset, records::kLocalHeaderSize, size) &&
        data.substr(e.local_header_offset, 4) == records::kLocalSig) {
      const std::string_view lh = data.substr(e.local_header_offset, records::kLocalHeaderSize);
      const uint16_t lname_len = U16(lh, 26), lextra_len = U16(lh, 28);
      e.local_flags = U16(lh, 6);
      e.local_name = std::string(Slice(data, e.local_header_offset + records::kLocalHeaderSize, lname_len));
      const bool same_encoding = ((e.local_flags ^ e.cd_flags) & records::kFlagUtf8) == 0 ||
                                 (IsAscii(e.local_name) && IsAscii(raw_name));
      e.local_header_ok = e.local_name == raw_name && same_encoding;
      e.data_offset = e.local_header_offset + records::kLocalHeaderSize + lname_len + lextra_len;
    }
    total += records::kCdHeaderSize + name_len + extra_len + comment_len;
    // NameToInfo[name] = the later entry; `opened` keeps the order names first appear in.
    auto [it, inserted] = by_name.try_emplace(e.name, out.opened.size());
    if (inserted) {
      out.opened.push_back(out.entries.size());
    } else {
      out.opened[it->second] = out.entries.size();
    }
    out.entries.push_back(std::move(e));
  }
  return out;
}

}  // namespace ckptscan::zip
