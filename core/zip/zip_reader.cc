// Archive::Open: reads the end record and the central directory, sorts the directory as miniz
// does, takes torch's archive folder from the first entry, then runs the structural checks and
// accounts for every byte of the file. The pieces are in the zip_reader_*.cc files beside this
// one (zip_reader_internal.h lists them); Archive's other methods are in zip_reader_lookup.cc,
// zip_reader_member.cc and zip_reader_torch_records.cc.
#include "core/zip/zip_reader.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/status_macros.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip {

using base::CheckedAdd;
using internal::AnomalySink;
using internal::CheckCoverage;
using internal::CheckEntries;
using internal::CheckLocalHeaders;
using internal::CheckNameCollisions;
using internal::Corrupt;
using internal::EndRecord;
using internal::MinizSortedOrder;
using internal::Quoted;
using internal::RawEntry;
using internal::ReadCentralDirectory;
using internal::ReadEndRecord;
using internal::SigAt;
using internal::Span;
using records::kEocdSize;
using records::kLocalSig;
using records::kZip64LocatorSig;
using records::kZip64LocatorSize;

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

}  // namespace ckptscan::zip
