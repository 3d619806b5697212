#include "core/zip/zipfile_view.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/json_text.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/zip/records.h"

namespace ckptscan::zip {
namespace {

constexpr uint16_t kMaxExtractVersion = 63;
constexpr uint16_t kUnicodePathExtra = 0x7075;
constexpr uint16_t kZip64Extra = 0x0001;

// What one release does at the places where releases differ (zipfile_view.h).
struct Behaviour {
  bool checked_zip64;       // gh-139700: the ZIP64 locator and record are checked
  bool unicode_path_extra;  // 3.12+: the 0x7075 field names the entry
  uint64_t comment_window;  // bytes before the 22-byte end record that are searched
};

Behaviour BehaviourOf(ZipfileRelease release) {
  switch (release) {
    case ZipfileRelease::kPython311:
      return {false, false, 1u << 16};
    case ZipfileRelease::kPython311Zip64Checked:
      return {true, false, 1u << 16};
    case ZipfileRelease::kPython313:
      return {false, true, 1u << 16};
    case ZipfileRelease::kPython313Zip64Checked:
      return {true, true, (1u << 16) - 1};  // ZIP_MAX_COMMENT
  }
  return {true, true, 1u << 16};
}

// The high half of code page 437 (zipfile decodes names without flag 0x800 with it); the low
// half is ASCII.
// clang-format off
constexpr uint16_t kCp437High[128] = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7,
    0x00EA, 0x00EB, 0x00E8, 0x00EF, 0x00EE, 0x00EC, 0x00C4, 0x00C5,
    0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9,
    0x00FF, 0x00D6, 0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192,
    0x00E1, 0x00ED, 0x00F3, 0x00FA, 0x00F1, 0x00D1, 0x00AA, 0x00BA,
    0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556,
    0x2555, 0x2563, 0x2551, 0x2557, 0x255D, 0x255C, 0x255B, 0x2510,
    0x2514, 0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F,
    0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256C, 0x2567,
    0x2568, 0x2564, 0x2565, 0x2559, 0x2558, 0x2552, 0x2553, 0x256B,
    0x256A, 0x2518, 0x250C, 0x2588, 0x2584, 0x258C, 0x2590, 0x2580,
    0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4,
    0x03A6, 0x0398, 0x03A9, 0x03B4, 0x221E, 0x03C6, 0x03B5, 0x2229,
    0x2261, 0x00B1, 0x2265, 0x2264, 0x2320, 0x2321, 0x00F7, 0x2248,
    0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0,
};
// clang-format on

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

// Signed offsets: Python's integers do not wrap, and zipfile compares and subtracts freely.
using Wide = __int128;

// bytes.decode("cp437"), as UTF-8.
std::string Cp437ToUtf8(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (unsigned char c : raw) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      continue;
    }
    const uint16_t cp = kCp437High[c - 0x80];
    if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    }
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

// A name as zipfile decodes it (flag 0x800: UTF-8, strictly; else cp437), as UTF-8. nullopt:
// the UTF-8 decode raises.
std::optional<std::string> DecodeName(std::string_view raw, uint16_t flags) {
  if ((flags & records::kFlagUtf8) == 0) return Cp437ToUtf8(raw);
  if (!base::IsValidUtf8(raw)) return std::nullopt;
  return std::string(raw);
}

// _sanitize_filename on Linux: the name ends at its first NUL.
std::string CutAtNul(std::string_view s) {
  const size_t nul = s.find('\0');
  return std::string(nul == std::string_view::npos ? s : s.substr(0, nul));
}

// Where _EndRecData finds the end record: the last 22 bytes when they hold one without a
// comment, else the last signature in the last `window` + 22 bytes (whatever its comment
// length says).
absl::StatusOr<uint64_t> FindEndRecord(std::string_view data, uint64_t window) {
  const uint64_t size = data.size();
  if (size < records::kEocdSize) return BadZip(0, "file is not a zip file");
  const std::string_view last = data.substr(size - records::kEocdSize);
  if (last.substr(0, 4) == records::kEocdSig && U16(last, 20) == 0) {
    return size - records::kEocdSize;
  }
  const uint64_t span = window + records::kEocdSize;
  const uint64_t from = size > span ? size - span : 0;
  const size_t found = data.substr(from).rfind(records::kEocdSig);
  if (found == std::string_view::npos) return BadZip(0, "file is not a zip file");
  const uint64_t eocd = from + found;
  if (size - eocd < records::kEocdSize) {
    return BadZip(eocd, "file is not a zip file (truncated end record)");
  }
  return eocd;
}

// What _RealGetContents takes from the end records.
struct EndRecords {
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  // _ECD_LOCATION after _EndRecData64: where the directory is taken to end (the end record,
  // or the ZIP64 end record that is used).
  Wide location = 0;
  bool zip64 = false;
};

// _EndRecData64 before gh-139700: the ZIP64 end record is the 56 bytes right before the
// locator, used when its signature is there. (On a real file a locator less than 76 bytes into
// the file makes the seek fail and zipfile refuse the archive; over an io.BytesIO the seek
// stops at 0. The model reads on, as the more permissive of the two.)
void Zip64BeforeLocator(std::string_view data, uint64_t eocd, EndRecords* out) {
  if (eocd < records::kZip64LocatorSize + records::kZip64EocdSize) return;
  const uint64_t at = eocd - records::kZip64LocatorSize - records::kZip64EocdSize;
  const std::string_view z = data.substr(at, records::kZip64EocdSize);
  if (z.substr(0, 4) != records::kZip64EocdSig) return;
  out->zip64 = true;
  out->cd_size = U64(z, 40);
  out->cd_offset = U64(z, 48);
  out->location = at;
}

// _EndRecData64 with gh-139700: the locator's offset must not be past where a record right
// before the locator would start; the record is read there, or (bytes prepended, nothing
// signed where the locator points) right before the locator; its directory must end where the
// locator points, and its size field must cover the bytes up to the locator.
absl::Status Zip64Checked(std::string_view data, uint64_t eocd, std::string_view locator,
                          EndRecords* out) {
  const uint64_t locator_at = eocd - records::kZip64LocatorSize;
  const uint64_t reloff = U64(locator, 8);
  const Wide before_locator = static_cast<Wide>(locator_at) - records::kZip64EocdSize;
  if (static_cast<Wide>(reloff) > before_locator) {
    return BadZip(locator_at, "corrupt zip64 end of central directory locator");
  }
  // Now 0 <= reloff <= before_locator: 56 bytes are there at either place.
  uint64_t at = reloff;
  uint64_t extensible = static_cast<uint64_t>(before_locator) - reloff;
  if (data.substr(at, 4) != records::kZip64EocdSig && static_cast<Wide>(reloff) != before_locator) {
    at = static_cast<uint64_t>(before_locator);
    extensible = 0;
  }
  const std::string_view z = data.substr(at, records::kZip64EocdSize);
  if (z.substr(0, 4) != records::kZip64EocdSig) {
    return BadZip(at, "zip64 end of central directory record not found");
  }
  const uint64_t record_size = U64(z, 4);
  const uint64_t cd_size = U64(z, 40);
  const uint64_t cd_offset = U64(z, 48);
  if (static_cast<Wide>(cd_offset) + cd_size != static_cast<Wide>(reloff) ||
      static_cast<Wide>(record_size) + 12 !=
          static_cast<Wide>(records::kZip64EocdSize) + extensible) {
    return BadZip(at, "corrupt zip64 end of central directory record");
  }
  out->zip64 = true;
  out->cd_size = cd_size;
  out->cd_offset = cd_offset;
  out->location = at;
  return absl::OkStatus();
}

absl::StatusOr<EndRecords> ReadEndRecords(std::string_view data, const Behaviour& b) {
  CKPT_ASSIGN_OR_RETURN(const uint64_t eocd, FindEndRecord(data, b.comment_window));
  const std::string_view rec = data.substr(eocd, records::kEocdSize);
  EndRecords out;
  out.cd_size = U32(rec, 12);
  out.cd_offset = U32(rec, 16);
  out.location = eocd;
  // A ZIP64 locator right before the end record, on one disk.
  if (eocd < records::kZip64LocatorSize) return out;
  const uint64_t locator_at = eocd - records::kZip64LocatorSize;
  const std::string_view loc = data.substr(locator_at, records::kZip64LocatorSize);
  if (loc.substr(0, 4) != records::kZip64LocatorSig) return out;
  if (U32(loc, 4) != 0 || U32(loc, 16) > 1) {
    return BadZip(locator_at, "zipfiles that span multiple disks are not supported");
  }
  if (b.checked_zip64) {
    CKPT_RETURN_IF_ERROR(Zip64Checked(data, eocd, loc, &out));
  } else {
    Zip64BeforeLocator(data, eocd, &out);
  }
  return out;
}

// ZipInfo._decodeExtra: each ZIP64 field replaces the value that is at its sentinel, in order;
// with the Unicode Path field (3.12+), a version-1 record whose CRC-32 is the raw name's
// renames the entry.
absl::Status DecodeExtra(std::string_view extra, std::string_view raw_name, uint64_t at,
                         const Behaviour& b, const Limits& limits, Entry* e) {
  while (extra.size() >= 4) {
    const uint16_t tp = U16(extra, 0);
    const uint16_t ln = U16(extra, 2);
    if (static_cast<uint64_t>(ln) + 4 > extra.size()) {
      return BadZip(at, absl::StrFormat("corrupt extra field %04x (size=%d)", tp, ln));
    }
    std::string_view d = extra.substr(4, ln);
    if (tp == kZip64Extra) {
      auto take = [&d](uint64_t* v) {
        if (d.size() < 8) return false;
        *v = U64(d, 0);
        d.remove_prefix(8);
        return true;
      };
      if ((e->uncompressed_size == records::kU32Sentinel || e->uncompressed_size == ~uint64_t{0}) &&
          !take(&e->uncompressed_size)) {
        return BadZip(at, "corrupt zip64 extra field: file size not found");
      }
      if (e->compressed_size == records::kU32Sentinel && !take(&e->compressed_size)) {
        return BadZip(at, "corrupt zip64 extra field: compress size not found");
      }
      if (e->local_header_offset == records::kU32Sentinel && !take(&e->local_header_offset)) {
        return BadZip(at, "corrupt zip64 extra field: header offset not found");
      }
    } else if (tp == kUnicodePathExtra && b.unicode_path_extra) {
      if (d.size() < 5) return BadZip(at, "corrupt unicode path extra field (0x7075)");
      const uint8_t version = static_cast<uint8_t>(d[0]);
      const uint32_t name_crc = U32(d, 1);
      const uint32_t raw_crc = static_cast<uint32_t>(crc32(
          0L, reinterpret_cast<const Bytef*>(raw_name.data()), static_cast<uInt>(raw_name.size())));
      if (version == 1 && name_crc == raw_crc) {
        const std::string_view unicode = d.substr(5);
        if (!base::IsValidUtf8(unicode)) {
          return BadZip(at, "corrupt unicode path extra field (0x7075): invalid utf-8 bytes");
        }
        if (unicode.size() > limits.max_name_bytes) {
          return Limit("max_name_bytes", unicode.size(), limits.max_name_bytes, at);
        }
        if (!unicode.empty()) e->name = CutAtNul(unicode);  // empty: a warning, no rename
      }
    }
    extra.remove_prefix(static_cast<size_t>(ln) + 4);
  }
  return absl::OkStatus();
}

// ZipFile.open up to the data: 30 bytes signed PK\3\4 at the (shifted) offset, and the local
// name, decoded by the LOCAL flag 0x800, equal to the directory's full decoded name. Fills the
// local fields and `local_header_ok`.
void CheckLocalHeader(std::string_view data, std::string_view orig_name, Entry* e) {
  if (!base::RangeWithin(e->local_header_offset, records::kLocalHeaderSize, data.size()) ||
      data.substr(e->local_header_offset, 4) != records::kLocalSig) {
    return;
  }
  const std::string_view lh = data.substr(e->local_header_offset, records::kLocalHeaderSize);
  const uint16_t lname_len = U16(lh, 26), lextra_len = U16(lh, 28);
  e->local_flags = U16(lh, 6);
  e->local_name =
      std::string(Slice(data, e->local_header_offset + records::kLocalHeaderSize, lname_len));
  const std::optional<std::string> local_text = DecodeName(e->local_name, e->local_flags);
  e->local_header_ok = local_text.has_value() && *local_text == orig_name;
  e->data_offset = e->local_header_offset + records::kLocalHeaderSize + lname_len + lextra_len;
}

}  // namespace

std::string_view ZipfileReleaseName(ZipfileRelease release) {
  switch (release) {
    case ZipfileRelease::kPython311:
      return "3.11";
    case ZipfileRelease::kPython311Zip64Checked:
      return "3.11+zip64check";
    case ZipfileRelease::kPython313:
      return "3.13";
    case ZipfileRelease::kPython313Zip64Checked:
      return "3.13+zip64check";
  }
  return "?";
}

absl::StatusOr<ZipfileDirectory> ReadZipfileDirectory(std::string_view data, ZipfileRelease release,
                                                      const Limits& limits) {
  const Behaviour b = BehaviourOf(release);
  const uint64_t size = data.size();
  CKPT_ASSIGN_OR_RETURN(const EndRecords end, ReadEndRecords(data, b));
  const uint64_t cd_size = end.cd_size;
  const uint64_t end_at = end.location < 0 ? 0 : static_cast<uint64_t>(end.location);

  ZipfileDirectory out;
  out.zip64 = end.zip64;
  // _RealGetContents: offsets shift by concat; entries are read until cd_size bytes are used.
  const Wide concat = end.location - cd_size - end.cd_offset;
  const Wide start_dir = static_cast<Wide>(end.cd_offset) + concat;
  if (start_dir < 0) return BadZip(end_at, "bad offset for central directory");
  if (cd_size > limits.max_central_directory_bytes) {
    return Limit("max_central_directory_bytes", cd_size, limits.max_central_directory_bytes,
                 end_at);
  }
  out.concat = static_cast<int64_t>(concat);
  const uint64_t dir_at =
      start_dir > static_cast<Wide>(size) ? size : static_cast<uint64_t>(start_dir);
  const std::string_view dir = Slice(data, dir_at, cd_size);
  std::map<std::string, size_t, std::less<>> by_name;
  uint64_t total = 0;
  uint64_t pos = 0;                 // in `dir`, as the BytesIO over it reads
  uint64_t total_uncompressed = 0;  // bounds the work of reading every member (overlaps)
  while (total < cd_size) {
    const uint64_t at = dir_at + pos;
    if (dir.size() - pos < records::kCdHeaderSize) return BadZip(at, "truncated central directory");
    const std::string_view h = dir.substr(pos, records::kCdHeaderSize);
    if (h.substr(0, 4) != records::kCdSig)
      return BadZip(at, "bad magic number for central directory");
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
    // ZipInfo(filename): the decoded name; orig_filename keeps what follows a NUL.
    const std::optional<std::string> orig_name = DecodeName(raw_name, e.cd_flags);
    if (!orig_name.has_value()) return BadZip(at, "a UTF-8 flagged name that is not UTF-8");
    e.name = CutAtNul(*orig_name);
    const uint8_t extract_version = static_cast<uint8_t>(h[6]);  // one byte; then "reserved"
    if (extract_version > kMaxExtractVersion) {
      return BadZip(at, absl::StrFormat("zip file version %.1f", extract_version / 10.0));
    }
    e.method = U16(h, 10);
    e.dos_time = U16(h, 12);
    e.crc32 = U32(h, 16);
    e.compressed_size = U32(h, 20);
    e.uncompressed_size = U32(h, 24);
    e.external_attributes = U32(h, 38);
    e.local_header_offset = U32(h, 42);
    CKPT_RETURN_IF_ERROR(DecodeExtra(extra, raw_name, at, b, limits, &e));
    if (!base::CheckedAdd(total_uncompressed, e.uncompressed_size, &total_uncompressed) ||
        total_uncompressed > limits.max_total_uncompressed) {
      return Limit("max_total_uncompressed", total_uncompressed, limits.max_total_uncompressed, at);
    }
    // A shifted offset before the file (the seek fails) or past 2^64 - 1 (the read comes back
    // short) cannot be opened; it is kept as ~0.
    const Wide lho = static_cast<Wide>(e.local_header_offset) + concat;
    const bool representable = lho >= 0 && lho <= static_cast<Wide>(~uint64_t{0});
    e.local_header_offset = representable ? static_cast<uint64_t>(lho) : ~uint64_t{0};
    CheckLocalHeader(data, *orig_name, &e);
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
