// PyTorchStreamReader's record-level calls over an open Archive: getRecord by record name, the
// format version as its constructor reads and bounds it, and getAllRecords as torch.load uses it.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/zip/zip_reader.h"
#include "core/zip/zip_reader_internal.h"

namespace ckptscan::zip {
namespace {

using base::AbslView;
using base::CheckedAdd;
using base::CheckedMul;
using internal::CString;
using internal::kTorchNameBuffer;
using internal::MemberError;
using internal::Quoted;

constexpr uint64_t kMinSupportedVersion = 1;  // caffe2/serialize/versions.h, torch 1.13
constexpr uint64_t kMaxSupportedVersion = 10;

}  // namespace

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
