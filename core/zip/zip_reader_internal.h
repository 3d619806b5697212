// Private to core/zip: what the pieces of the torch-faithful reader (zip_reader.h) share. Open
// runs them in order: the end record (zip_reader_end_record.cc), the central directory
// (zip_reader_central_directory.cc), miniz's sorted order (zip_reader_lookup.cc), then the
// structural checks (zip_reader_local_headers.cc, zip_reader_entry_checks.cc,
// zip_reader_coverage.cc), all reporting through zip_reader_report.cc.
#ifndef CKPTSCAN_CORE_ZIP_ZIP_READER_INTERNAL_H_
#define CKPTSCAN_CORE_ZIP_ZIP_READER_INTERNAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/checked.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader.h"

namespace ckptscan::zip::internal {

// The general-purpose flag bits torch.save may set; CheckEntries reports any other.
inline constexpr uint16_t kFlagsTorchMayWrite =
    records::kFlagDeflateOptions | records::kFlagDescriptor | records::kFlagUtf8;
// PyTorchStreamReader::getAllRecords copies names into a buffer of this size
// (MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE), truncating longer ones.
inline constexpr size_t kTorchNameBuffer = 512;

// --- names -----------------------------------------------------------------------------------

inline bool IsUpper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
// MZ_TOLOWER: ASCII letters only.
inline unsigned char MzToLower(unsigned char c) { return IsUpper(c) ? c - 'A' + 'a' : c; }

// A C string's view of `s`: up to the first NUL (what strlen/strncmp/c_str consumers see).
inline std::string_view CString(std::string_view s) {
  size_t nul = s.find('\0');
  return nul == std::string_view::npos ? s : s.substr(0, nul);
}

// The first 200 bytes of `s`, with non-printable bytes and backslashes as \xNN; "..." when cut.
std::string Printable(std::string_view s);
// Printable(s) in double quotes: how messages show a member name.
std::string Quoted(std::string_view s);

// A directory: a trailing '/' or the DOS directory attribute.
inline bool IsDirectory(const Entry& e) {
  return (!e.name.empty() && e.name.back() == '/') ||
         (e.external_attributes & records::kDosDirectoryAttribute) != 0;
}

// Starts with a local header or an end record signature.
inline bool LooksLikeZip(std::string_view bytes) {
  return bytes.substr(0, 4) == records::kLocalSig || bytes.substr(0, 4) == records::kEocdSig;
}

// --- reporting (zip_reader_report.cc) --------------------------------------------------------

// Appends anomalies, at most Limits::max_anomalies_per_kind of each kind; Flush() then adds one
// summary per kind that overflowed.
class AnomalySink {
 public:
  AnomalySink(std::vector<Anomaly>* out, uint64_t cap) : out_(out), cap_(cap) {}
  AnomalySink(const AnomalySink&) = delete;
  AnomalySink& operator=(const AnomalySink&) = delete;

  void Flush();

  void Add(AnomalyKind kind, std::string_view member, uint64_t offset, std::string message,
           std::optional<bool> must_flag = std::nullopt);

 private:
  static constexpr size_t kKinds = static_cast<size_t>(AnomalyKind::kCrcMismatch) + 1;
  std::vector<Anomaly>* out_;
  uint64_t cap_;
  std::array<uint64_t, kKinds> count_{};
  std::array<uint64_t, kKinds> dropped_{};
};

// InvalidArgument "zip: <what> (at byte offset N)".
absl::Status Corrupt(uint64_t offset, std::string_view what);
// InvalidArgument naming central-directory entry #index and its name.
absl::Status EntryCorrupt(uint32_t index, std::string_view name, uint64_t offset,
                          std::string_view what);
// InvalidArgument naming the member being read.
absl::Status MemberError(const Entry& e, uint64_t offset, std::string_view what);
// ResourceExhausted naming the Limits field `limit` (and the member, when there is one).
absl::Status Limit(std::string_view limit, uint64_t value, uint64_t max, uint64_t offset,
                   std::string_view member = "");

// Whether data[offset, offset + sig.size()) is `sig`.
inline bool SigAt(std::string_view data, uint64_t offset, std::string_view sig) {
  return base::RangeWithin(offset, sig.size(), data.size()) &&
         data.substr(offset, sig.size()) == sig;
}

// --- the end record (zip_reader_end_record.cc) -----------------------------------------------

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

// mz_zip_reader_read_central_dir's first half: finds the end record where miniz does, applies the
// ZIP64 locator and record, and fails exactly where miniz does.
absl::StatusOr<EndRecord> ReadEndRecord(std::string_view data, AnomalySink& anomalies);

// --- the central directory (zip_reader_central_directory.cc) ---------------------------------

struct RawEntry {
  Entry entry;
  uint16_t cd_extra_length = 0;
  std::string_view cd_extra;
};

// mz_zip_reader_read_central_dir's walk over the entries, with miniz's checks and the Limits.
absl::StatusOr<std::vector<RawEntry>> ReadCentralDirectory(std::string_view data,
                                                           const EndRecord& end,
                                                           const Limits& limits,
                                                           AnomalySink& anomalies);

// --- miniz's sorted directory (zip_reader_lookup.cc) -----------------------------------------

// mz_zip_reader_sort_central_dir_offsets_by_filename: entry indices in miniz's sorted order.
std::vector<uint32_t> MinizSortedOrder(const std::vector<Entry>& entries);

// --- structural checks after the directory is read -------------------------------------------

// A byte range the archive accounts for (a member, a data descriptor, a directory record).
struct Span {
  uint64_t begin;
  uint64_t end;
  std::string what;
  std::string member;
};

// zip_reader_local_headers.cc: reads each entry's local header into `entries` (local_name,
// local_flags, data_offset, local_header_ok), reports how it departs from the central directory
// and its data descriptor, and adds the member and descriptor spans.
void CheckLocalHeaders(std::string_view data, const std::vector<RawEntry>& raws,
                       std::vector<Entry>& entries, std::vector<Span>& spans,
                       AnomalySink& anomalies);

// zip_reader_entry_checks.cc: flags, methods, sizes, directories, nested archives and names of
// each entry (torch's name rules when `torch_names`).
void CheckEntries(std::string_view data, const std::vector<Entry>& entries, std::string_view prefix,
                  bool torch_names, AnomalySink& anomalies);
// zip_reader_entry_checks.cc: duplicate names and names equal up to ASCII case, with the entry
// torch's lookup picks.
void CheckNameCollisions(const std::vector<Entry>& entries, const Archive& archive,
                         AnomalySink& anomalies);

// zip_reader_coverage.cc: overlapping spans, gaps between them, bytes before the first and after
// the last.
void CheckCoverage(std::string_view data, std::vector<Span> spans, AnomalySink& anomalies);

}  // namespace ckptscan::zip::internal

#endif  // CKPTSCAN_CORE_ZIP_ZIP_READER_INTERNAL_H_
