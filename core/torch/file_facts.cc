#include "core/torch/file_facts.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/limit_status.h"
#include "base/strings.h"

namespace ckptscan::torch {

bool IsDataFormat(std::string_view format) {
  for (std::string_view f :
       {"json", "text", "png", "jpeg", "gif", "webp", "sentencepiece", "empty"}) {
    if (format == f) return true;
  }
  return false;
}

absl::Status CheckShardFileName(std::string_view name) {
  const bool plain = !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
                     name.find('/') == std::string_view::npos &&
                     name.find('\0') == std::string_view::npos;
  if (plain) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("shard file name \"", base::AbslView(base::Escaped(name)),
                   "\" is not a plain file name in the index's directory"));
}

std::string_view NpzMemberFor(std::string_view key,
                              const absl::flat_hash_set<std::string_view>& members) {
  if (auto exact = members.find(key); exact != members.end()) return *exact;
  const std::string with_npy = std::string(key) + ".npy";
  if (auto npy = members.find(with_npy); npy != members.end()) return *npy;
  return {};
}

v1::ScanError ContainerError(v1::ErrorCode code, std::string message, std::string_view member,
                             uint64_t offset) {
  v1::ScanError e;
  e.set_code(code);
  e.set_message(std::move(message));
  e.mutable_location()->set_member(std::string(member));
  e.mutable_location()->set_offset(offset);
  return e;
}

v1::ErrorCode ErrorCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return v1::ERROR_CODE_LIMIT;
    case absl::StatusCode::kUnimplemented:
      return v1::ERROR_CODE_UNSUPPORTED;
    default:
      return v1::ERROR_CODE_MALFORMED;
  }
}

v1::ScanError StatusError(const absl::Status& status, std::string message, std::string_view member,
                          uint64_t offset) {
  v1::ScanError e = ContainerError(ErrorCodeOf(status), std::move(message), member, offset);
  if (std::optional<base::LimitHit> hit = base::LimitOf(status)) {
    e.set_limit_name(hit->name);
    e.set_limit_value(hit->value);
  }
  return e;
}

}  // namespace ckptscan::torch
