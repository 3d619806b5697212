#include "base/limit_status.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/strings.h"

namespace ckptscan::base {
namespace {

constexpr std::string_view kPayload = "type.ckptscan/limit";

}  // namespace

absl::Status LimitError(std::string_view message, std::string_view limit, uint64_t value) {
  absl::Status s = absl::ResourceExhaustedError(AbslView(message));
  s.SetPayload(AbslView(kPayload), absl::Cord(absl::StrCat(AbslView(limit), "=", value)));
  return s;
}

std::optional<LimitHit> LimitOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted) return std::nullopt;
  auto p = status.GetPayload(AbslView(kPayload));
  if (!p.has_value()) return std::nullopt;
  std::string text(*p);
  size_t eq = text.rfind('=');
  LimitHit hit;
  if (eq == std::string::npos || !absl::SimpleAtoi(text.substr(eq + 1), &hit.value)) {
    return std::nullopt;
  }
  hit.name = text.substr(0, eq);
  return hit;
}

absl::Status Reworded(const absl::Status& status, std::string_view message) {
  absl::Status out(status.code(), AbslView(message));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace ckptscan::base
