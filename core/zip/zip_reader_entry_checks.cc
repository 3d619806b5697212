// Checks of each central-directory entry on its own and against the others: flag bits torch never
// writes, compression methods, STORED size mismatches, directory entries, nested archives, odd
// names, torch's folder and TorchScript rules, upper case, and duplicate or case-colliding names.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/strings.h"
#include "core/zip/records.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip::internal {
namespace {

using base::AbslView;
using base::RangeWithin;
using records::kFlagEncrypted;
using records::kFlagMaskedLocalHeader;
using records::kFlagPatch;
using records::kFlagStrongEncryption;
using records::kMethodDeflate;
using records::kMethodStored;

std::string MzLowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(MzToLower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void CheckEntries(std::string_view data, const std::vector<Entry>& entries, std::string_view prefix,
                  bool torch_names, AnomalySink& anomalies) {
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

}  // namespace ckptscan::zip::internal
