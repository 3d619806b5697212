#include "core/safetensors/writer.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "core/safetensors/text.h"
#include "core/safetensors/validator.h"

namespace ckptscan::safetensors {
namespace {

using base::AbslView;

// Names and strings from the file, safe to print: invisible and bidi characters escaped too.
std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

constexpr uint64_t kLengthBytes = 8;
constexpr uint64_t kAlignment = 8;

absl::Status BadSpec(size_t index, std::string_view name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat("safetensors writer: tensor #%d \"%s\": %s",
                                                    index, AbslView(Esc(name)), AbslView(what)));
}

absl::Status CheckMetadataText(std::string_view role, std::string_view s) {
  if (std::optional<size_t> bad = base::FirstInvalidUtf8(s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("safetensors writer: metadata %s \"%s\" is not valid UTF-8 (byte %d)",
                        AbslView(role), AbslView(Esc(s)), *bad));
  }
  if (s.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "safetensors writer: metadata %s \"%s\" contains NUL", AbslView(role), AbslView(Esc(s))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SerializedHeader> SerializeHeader(
    std::span<const TensorSpec> tensors, const std::map<std::string, std::string>& metadata) {
  const ValidatorLimits limits;  // what we write must validate with the defaults

  // Metadata: caller's entries plus "format": "pt".
  std::map<std::string, std::string> meta = metadata;
  if (auto it = meta.find("format"); it != meta.end() && it->second != "pt") {
    return absl::InvalidArgumentError(
        absl::StrFormat("safetensors writer: metadata \"format\" must be \"pt\", got \"%s\"",
                        AbslView(Esc(it->second))));
  }
  meta["format"] = "pt";
  if (meta.size() > limits.max_metadata_entries) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "safetensors writer: %d metadata entries, over the limit %d (max_metadata_entries)",
        meta.size(), limits.max_metadata_entries));
  }
  for (const auto& [k, v] : meta) {
    if (absl::Status s = CheckMetadataText("key", k); !s.ok()) return s;
    if (absl::Status s = CheckMetadataText("value", v); !s.ok()) return s;
  }

  if (tensors.size() > limits.max_tensors) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("safetensors writer: %d tensors, over the limit %d (max_tensors)",
                        tensors.size(), limits.max_tensors));
  }
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = tensors[i];
    if (std::optional<std::string> problem = internal::TensorNameProblem(t.name)) {
      return BadSpec(i, t.name, "name " + *problem);
    }
    if (!names.insert(t.name).second) return BadSpec(i, t.name, "duplicate name");
    if (t.shape.size() > limits.max_rank) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "safetensors writer: tensor #%d \"%s\": rank %d over the limit %d (max_rank)", i,
          AbslView(Esc(t.name)), t.shape.size(), limits.max_rank));
    }
    uint64_t numel = 1;
    for (uint64_t d : t.shape) {
      if (!base::CheckedMul(numel, d, &numel)) {
        return BadSpec(i, t.name, "element count overflows 64 bits");
      }
    }
    uint64_t nbits;
    if (!base::CheckedMul(numel, uint64_t{DtypeBits(t.dtype)}, &nbits)) {
      return BadSpec(i, t.name, "bit size overflows 64 bits");
    }
    if (nbits % 8 != 0) {
      return BadSpec(i, t.name,
                     absl::StrFormat("%d %s elements are not a whole number of bytes", numel,
                                     AbslView(DtypeName(t.dtype))));
    }
    if (nbits / 8 != t.byte_size) {
      return BadSpec(i, t.name,
                     absl::StrFormat("byte_size %d, but %d %s elements take %d bytes", t.byte_size,
                                     numel, AbslView(DtypeName(t.dtype)), nbits / 8));
    }
  }

  // The reference order: dtype descending, then name ascending (bytewise).
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TensorSpec& x = tensors[a];
    const TensorSpec& y = tensors[b];
    if (x.dtype != y.dtype) return x.dtype > y.dtype;
    return x.name < y.name;
  });

  SerializedHeader out;
  out.placements.reserve(order.size());
  std::string json = "{\"__metadata__\":{";
  bool first = true;
  for (const auto& [k, v] : meta) {
    if (!first) json.push_back(',');
    first = false;
    base::AppendJsonString(&json, k);
    json.push_back(':');
    base::AppendJsonString(&json, v);
  }
  json.push_back('}');
  uint64_t offset = 0;
  for (size_t index : order) {
    const TensorSpec& t = tensors[index];
    uint64_t end;
    if (!base::CheckedAdd(offset, t.byte_size, &end)) {
      return absl::InvalidArgumentError("safetensors writer: total tensor bytes overflow 64 bits");
    }
    json.push_back(',');
    base::AppendJsonString(&json, t.name);
    absl::StrAppend(&json, ":{\"dtype\":\"", AbslView(DtypeName(t.dtype)), "\",\"shape\":[");
    for (size_t d = 0; d < t.shape.size(); ++d) {
      absl::StrAppend(&json, d == 0 ? "" : ",", t.shape[d]);
    }
    absl::StrAppend(&json, "],\"data_offsets\":[", offset, ",", end, "]}");
    out.placements.push_back(Placement{index, offset, end, 0});
    offset = end;
  }
  json.push_back('}');
  json.append((kAlignment - json.size() % kAlignment) % kAlignment, ' ');
  if (json.size() > limits.max_header_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "safetensors writer: header of %d bytes is over the limit %d (max_header_bytes)",
        json.size(), limits.max_header_bytes));
  }

  const uint64_t n = json.size();
  const uint64_t data_start = kLengthBytes + n;
  if (!base::CheckedAdd(data_start, offset, &out.file_size)) {
    return absl::InvalidArgumentError("safetensors writer: file size overflows 64 bits");
  }
  out.bytes.reserve(data_start);
  for (int i = 0; i < 8; ++i) out.bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out.bytes.append(json);
  for (Placement& p : out.placements) p.file_offset = data_start + p.data_begin;
  return out;
}

}  // namespace ckptscan::safetensors
