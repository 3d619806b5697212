// How the torch-faithful reader reports: the stable anomaly names, the per-kind cap on anomalies
// (AnomalySink), member names quoted for messages, and the error statuses it fails with.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/zip/zip_reader.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip {
namespace internal {
namespace {

using base::AbslView;

bool MustFlagByDefault(AnomalyKind kind) {
  return kind != AnomalyKind::kArchiveComment && kind != AnomalyKind::kDeflated;
}

}  // namespace

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

void AnomalySink::Flush() {
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

void AnomalySink::Add(AnomalyKind kind, std::string_view member, uint64_t offset,
                      std::string message, std::optional<bool> must_flag) {
  auto k = static_cast<size_t>(kind);
  if (count_[k]++ >= cap_) {
    ++dropped_[k];
    return;
  }
  out_->push_back({kind, std::string(member), offset, std::move(message),
                   must_flag.value_or(MustFlagByDefault(kind))});
}

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
                   std::string_view member) {
  return base::LimitError(
      absl::StrFormat("zip%s: %s is %d, over the limit %d (Limits::%s; at byte offset %d)",
                      member.empty() ? "" : absl::StrCat(" member ", Quoted(member)),
                      AbslView(limit), value, max, AbslView(limit), offset),
      limit, max);
}

}  // namespace internal

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

}  // namespace ckptscan::zip
