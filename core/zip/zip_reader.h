// The zip reader for torch checkpoints: reads an archive exactly the way torch's own reader does
// (PyTorchStreamReader in caffe2/serialize/inline_container.cc over its bundled miniz 2.1.0, as
// shipped in torch 1.13.1), and reports every way the archive departs from what torch.save
// writes. Fidelity is the security property: a reader that picks a different copy of data.pkl
// than torch does is a scanner bypass. docs/zip.md lists the facts this follows.
//
// What is emulated: where the end record is searched for and which one wins; ZIP64; every check
// miniz makes while opening (an archive torch cannot open, Open cannot either); the lookup
// (ASCII case-insensitive, over miniz's heap-sorted directory, so which duplicate wins is
// miniz's answer, not "first" or "last"); the archive folder taken from the first entry; data
// offsets taken from the local header's name and extra lengths; reading STORED and DEFLATE
// members (CRC not checked, as torch builds miniz with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS, but
// a mismatch is always reported); the `version` record and torch.load's get_all_records().
//
// Untrusted bytes are read through base::ByteReader; every offset is overflow-checked; every
// count is bounded by Limits before anything is allocated. No recursion.
//
// Lifetimes and threading: an Archive keeps a view of `data`, which must outlive it and every
// Member read from it. An Archive is immutable after Open; its methods may be called
// concurrently.
//
//   CKPT_ASSIGN_OR_RETURN(zip::Archive ar, zip::Archive::Open(file_bytes, zip::Limits{}));
//   CKPT_ASSIGN_OR_RETURN(zip::Member pkl, ar.ReadRecord("data.pkl"));  // prefix + "/data.pkl"
//   scan(pkl.bytes());  // and report ar.anomalies() + pkl.anomalies()
#ifndef CKPTSCAN_CORE_ZIP_ZIP_READER_H_
#define CKPTSCAN_CORE_ZIP_ZIP_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckptscan::zip {

// Named limits; Open and Read fail with ResourceExhausted, naming the limit, past any of them.
// Defaults admit every torch.save checkpoint we know of (tens of thousands of storages, files of
// hundreds of GiB) on a worker with a few GiB of memory.
struct Limits {
  uint64_t max_entries = 1 << 16;                   // central-directory entries
  uint64_t max_name_bytes = 1024;                   // one member name (torch: "<folder>/data/N")
  uint64_t max_central_directory_bytes = 16 << 20;  // the central directory, read whole
  // Declared uncompressed size of one DEFLATE member: Read allocates that much. STORED members
  // are returned as views of `data` and are not bounded by this.
  uint64_t max_member_bytes = 1ull << 30;
  // Declared uncompressed / compressed size of a DEFLATE member, checked before anything is
  // allocated. DEFLATE cannot exceed ~1032:1, so the default refuses only declared sizes that no
  // stream of that length can produce; sparse arrays that numpy and torch read (masks of
  // zeros) reach several hundred to one.
  uint64_t max_compression_ratio = 1100;
  // Sum of the declared uncompressed sizes of all entries: bounds the work of reading every
  // member of an archive whose entries overlap (a "better zip bomb").
  uint64_t max_total_uncompressed = 256ull << 30;
  uint64_t max_anomalies_per_kind = 64;  // beyond this, one summary anomaly of the same kind
};

enum class AnomalyKind {
  kPrependedData,           // bytes before the first member (pickle + zip polyglot)
  kAppendedData,            // bytes after the end record and its comment
  kArchiveComment,          // the end record carries a comment
  kMultipleEocd,            // more than one end-record signature where miniz searches
  kZip64Mismatch,           // ZIP64 record disagrees with the 32-bit end record, or is broken
  kCentralDirectorySlack,   // central-directory bytes beyond the entries counted
  kGap,                     // bytes referenced by nothing (an unlisted local header, a shadow CD)
  kOverlap,                 // two members, or a member and the directory, share bytes
  kDuplicateName,           // two entries with the same name
  kCaseCollision,           // names equal under miniz's ASCII case folding only
  kUppercaseName,           // ASCII upper case after the folder (torch.save writes lower case)
  kOddName,                 // NUL, control characters, '\', "..", or a leading '/'
  kNameOutsidePrefix,       // not under "<folder>/": torch.load's get_all_records() throws
  kTorchScriptMarker,       // a constants.pkl record: torch.load hands the file to torch.jit.load
  kUnusualFlags,            // general-purpose flag bits torch never sets (encryption, patch, ...)
  kUnsupportedMethod,       // neither STORED nor DEFLATE: torch cannot read the member
  kLocalHeaderMismatch,     // local header name/flags/method/CRC/sizes differ from the CD
  kBadLocalHeader,          // local header missing, unsigned, or its data runs past the end
  kMalformedExtraField,     // an extra field that is not a well-formed list of (id, length)
  kDataDescriptorMismatch,  // the data descriptor's CRC or sizes differ from the CD
  kSizeMismatch,            // STORED member whose compressed and uncompressed sizes differ
  kDirectoryEntry,          // a directory (trailing '/' or DOS attribute) with a size
  kNestedArchive,           // a member that is itself a zip archive
  kDeflated,                // a DEFLATE member (torch.save only writes STORED)
  kInflateMismatch,         // DEFLATE stream shorter/longer than declared, corrupt, or padded
  kCrcMismatch,             // the bytes torch reads do not match the CD's CRC-32
};

// "kGap" etc., stable for reports and tests.
std::string_view AnomalyKindName(AnomalyKind kind);

struct Anomaly {
  AnomalyKind kind;
  std::string member;   // central-directory name; empty for archive-level anomalies
  uint64_t offset = 0;  // absolute byte offset in the file
  std::string message;
  bool must_flag = true;  // the verdict must be at least SUSPICIOUS
};

// One central-directory entry, with the values miniz's file_stat reports (ZIP64 applied).
struct Entry {
  uint32_t index = 0;             // position in the central directory (CD order)
  uint64_t cd_header_offset = 0;  // absolute offset of this entry's CD header
  std::string name;               // CD name, raw bytes
  uint16_t cd_flags = 0;
  uint16_t method = 0;
  uint16_t dos_time = 0;
  uint32_t crc32 = 0;  // as the CD says
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint32_t external_attributes = 0;
  // From the local header, when it is readable (local_header_ok):
  bool local_header_ok = false;
  std::string local_name;
  uint16_t local_flags = 0;
  // local header offset + 30 + local name length + local extra length, as torch computes it.
  uint64_t data_offset = 0;
  // Set when miniz's file_stat would fail on this entry (malformed ZIP64 extra field): torch
  // cannot read it, and Read fails with this message.
  std::string stat_error;
};

// The bytes torch's getRecord would return for one member.
class Member final {
 public:
  // STORED: a view of the archive. DEFLATE: owned inflated bytes.
  std::string_view bytes() const { return owned_ ? std::string_view(*owned_) : view_; }
  // False when torch's buffer would hold more than bytes(): miniz stopped early (directory
  // entry, corrupt or short DEFLATE stream) and left the rest of its malloc'd buffer
  // uninitialised. torch still hands that buffer to the unpickler.
  bool complete() const { return complete_; }
  uint64_t declared_size() const { return declared_size_; }
  // CRC mismatch, inflate trouble, nested archive: found while reading.
  const std::vector<Anomaly>& anomalies() const { return anomalies_; }

 private:
  friend class Archive;
  std::string_view view_;
  std::optional<std::string> owned_;
  bool complete_ = true;
  uint64_t declared_size_ = 0;
  std::vector<Anomaly> anomalies_;
};

// Whose reader to emulate when opening. kTorch: PyTorchStreamReader (the archive folder is
// required and the torch-specific name checks apply). kZipfile: an archive read by Python's
// zipfile (numpy's .npz): no folder, prefix() is empty, torch's name checks do not apply; the
// structural checks and anomalies are the same.
enum class Mode { kTorch, kZipfile };

class Archive final {
 public:
  // Opens `data` (the whole file) as miniz's mz_zip_reader_init and PyTorchStreamReader's
  // constructor do: fails (InvalidArgument, naming the offset) exactly when they would, and
  // with ResourceExhausted past a limit. Everything odd that torch tolerates is an anomaly.
  // Refuses one thing torch accepts: a first entry whose folder name contains a NUL byte
  // (torch would then look every record up under a truncated name).
  static absl::StatusOr<Archive> Open(std::string_view data, const Limits& limits = Limits(),
                                      Mode mode = Mode::kTorch);
  // The Archive would outlive a temporary string's bytes.
  static absl::StatusOr<Archive> Open(std::string&& data, const Limits& limits = Limits(),
                                      Mode mode = Mode::kTorch) = delete;

  // In central-directory order.
  const std::vector<Entry>& entries() const { return entries_; }
  // The archive folder torch uses: the first entry's name up to its first '/'.
  std::string_view prefix() const { return prefix_; }
  // Structural anomalies found by Open (Read adds member-level ones to its Member).
  const std::vector<Anomaly>& anomalies() const { return anomalies_; }
  // torch.serialization._is_zipfile: the file starts with "PK\3\4". When false, torch.load
  // takes the legacy (raw pickle) path instead of this archive, whatever the end record says.
  bool starts_with_local_header() const { return starts_with_local_header_; }

  // mz_zip_reader_locate_file(name, nullptr, 0): the name is read as a C string (up to its first
  // NUL), compared ASCII case-insensitively, found by binary search over miniz's heap sort.
  const Entry* Locate(std::string_view name) const;
  // PyTorchStreamReader::getRecordID: Locate(prefix() + "/" + record).
  const Entry* LocateRecord(std::string_view record) const;

  // mz_zip_reader_extract_to_mem, as getRecord calls it. Fails where torch's getRecord throws.
  absl::StatusOr<Member> Read(const Entry& entry) const;
  // The same for an entry of another reader's directory of `data` (zipfile_view.h), when no
  // Archive could be opened; the Member views `data`.
  static absl::StatusOr<Member> ReadEntry(std::string_view data, const Entry& entry,
                                          const Limits& limits);
  // getRecord(record): LocateRecord + Read; "file not found" when the lookup fails.
  absl::StatusOr<Member> ReadRecord(std::string_view record) const;

  // The format version as PyTorchStreamReader's constructor reads it: ".data/version" if
  // present, else "version", parsed by std::stoull, within [1, 10]; otherwise the error torch
  // would throw.
  absl::StatusOr<uint64_t> Version() const;
  // PyTorchStreamReader::getAllRecords, which torch.load calls to look for constants.pkl: names
  // with the folder stripped; fails when an entry is not under "<folder>/".
  absl::StatusOr<std::vector<std::string>> AllRecords() const;

  const Limits& limits() const { return limits_; }

 private:
  Archive() = default;

  std::string_view data_;
  Limits limits_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> sorted_;  // miniz's m_sorted_central_dir_offsets
  std::string prefix_;
  std::vector<Anomaly> anomalies_;
  bool starts_with_local_header_ = false;
};

}  // namespace ckptscan::zip

#endif  // CKPTSCAN_CORE_ZIP_ZIP_READER_H_
