#include "app/limit_flags.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/checked.h"
#include "base/size_value.h"
#include "base/strings.h"

namespace ckptscan::app {
namespace {

using pickle::Limits;

// A new Limits field must be added to Fields() below (and documented in
// docs/cli.md). Format limits come from core/formats/format_limits.h.
static_assert(sizeof(Limits) == 14 * sizeof(uint64_t),
              "pickle::Limits changed: update the --limit table in "
              "app/limit_flags.cc");

struct Field {
  LimitFlag flag;
  uint64_t Limits::*u64 = nullptr;
  uint32_t Limits::*u32 = nullptr;
};

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = [] {
    const Limits d;
    return std::vector<Field>{
        {{"max_opcodes", "opcodes executed per pickle", d.max_opcodes, kU64Max},
         &Limits::max_opcodes},
        {{"max_stack_depth", "items on the VM stack", d.max_stack_depth, kU64Max},
         &Limits::max_stack_depth},
        {{"max_mark_depth", "MARKs open at once (nesting depth)", d.max_mark_depth, kU64Max},
         &Limits::max_mark_depth},
        {{"max_memo_entries", "memo entries set", d.max_memo_entries, kU64Max},
         &Limits::max_memo_entries},
        {{"max_memo_index", "a memo index (CPython sizes its memo array by it)", d.max_memo_index,
          kU64Max},
         &Limits::max_memo_index},
        {{"max_nodes", "values built per pickle", d.max_nodes, kU64Max}, &Limits::max_nodes},
        {{"max_expanded_values", "values of the loaded object with shared references copied out",
          d.max_expanded_values, kU64Max},
         &Limits::max_expanded_values},
        {{"max_value_depth", "nesting depth of one value (containers in containers)",
          d.max_value_depth, kU64Max},
         &Limits::max_value_depth},
        {{"max_string_bytes", "declared length of one str/bytes argument", d.max_string_bytes,
          kU64Max},
         &Limits::max_string_bytes},
        {{"max_line_bytes", "one text-argument line (protocol 0 opcodes)", d.max_line_bytes,
          kU64Max},
         &Limits::max_line_bytes},
        {{"max_total_bytes", "bytes of one stream", d.max_total_bytes, kU64Max},
         &Limits::max_total_bytes},
        {{"max_kept_string", "bytes of a str/bytes value kept for analysis", d.max_kept_string,
          kU64Max},
         &Limits::max_kept_string},
        {{"max_pickles", "pickles in one stream", d.max_pickles, kU32Max},
         nullptr,
         &Limits::max_pickles},
        {{"max_nested_depth", "pickles inside byte strings inside pickles, levels",
          d.max_nested_depth, kU32Max},
         nullptr,
         &Limits::max_nested_depth},
        {{"max_nested_bytes", "total bytes re-scanned as nested pickles", d.max_nested_bytes,
          kU64Max},
         &Limits::max_nested_bytes},
    };
  }();
  return fields;
}

absl::StatusOr<uint64_t> ParseValue(std::string_view text) { return base::ParseSize(text); }

std::string KnownNames() {
  std::string names;
  for (const LimitFlag& f : LimitFlags()) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", base::AbslView(f.name));
  }
  return names;
}

absl::Status BadValue(std::string_view spec, const absl::Status& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--limit ", base::AbslView(spec), ": ", why.message()));
}

// A value within `max`, or InvalidArgument naming the spec.
absl::StatusOr<uint64_t> ValueOf(std::string_view spec, std::string_view text, uint64_t max) {
  absl::StatusOr<uint64_t> value = ParseValue(text);
  if (value.ok() && *value > max) {
    value = absl::InvalidArgumentError(absl::StrCat("at most ", max));
  }
  if (!value.ok()) return BadValue(spec, value.status());
  return value;
}

}  // namespace

const std::vector<LimitFlag>& LimitFlags() {
  static const std::vector<LimitFlag> flags = [] {
    std::vector<LimitFlag> v;
    for (const Field& f : Fields()) v.push_back(f.flag);
    for (const formats::FormatLimitInfo& f : formats::FormatLimits()) {
      v.push_back({f.name, f.help, f.default_value, f.max_value});
    }
    return v;
  }();
  return flags;
}

std::vector<LimitInForce> LimitsInForce(const pickle::Limits& vm,
                                        const formats::FormatLimitSettings& format) {
  std::vector<LimitInForce> out;
  for (const Field& f : Fields()) {
    out.push_back({f.flag.name, f.u64 != nullptr ? vm.*f.u64 : uint64_t{vm.*f.u32}});
  }
  for (const formats::FormatLimitInfo& f : formats::FormatLimits()) {
    uint64_t value = f.default_value;
    for (const formats::FormatLimitSetting& s : format) {
      if (s.limit == f.id) value = s.value;
    }
    out.push_back({f.name, value});
  }
  return out;
}

absl::Status ApplyLimitFlag(std::string_view spec, LimitSettings* limits) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--limit ", base::AbslView(spec), ": expected NAME=VALUE"));
  }
  const std::string_view name = spec.substr(0, eq);
  const std::string_view text = spec.substr(eq + 1);
  for (const Field& f : Fields()) {
    if (f.flag.name != name) continue;
    absl::StatusOr<uint64_t> value = ValueOf(spec, text, f.flag.max_value);
    if (!value.ok()) return value.status();
    if (f.u64 != nullptr) {
      limits->vm.*f.u64 = *value;
    } else {
      limits->vm.*f.u32 = static_cast<uint32_t>(*value);
    }
    return absl::OkStatus();
  }
  if (const formats::FormatLimitInfo* f = formats::FindFormatLimit(name); f != nullptr) {
    absl::StatusOr<uint64_t> value = ValueOf(spec, text, f->max_value);
    if (!value.ok()) return value.status();
    for (formats::FormatLimitSetting& s : limits->format) {
      if (s.limit == f->id) {
        s.value = *value;
        return absl::OkStatus();
      }
    }
    limits->format.push_back({f->id, *value});
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--limit ", base::AbslView(spec), ": unknown limit; known: ", KnownNames()));
}

absl::StatusOr<LimitSettings> ParseLimitFlags(const std::vector<std::string>& specs) {
  LimitSettings limits;
  for (const std::string& spec : specs) {
    absl::Status s = ApplyLimitFlag(spec, &limits);
    if (!s.ok()) return s;
  }
  return limits;
}

absl::StatusOr<uint64_t> ParseSizeValue(std::string_view text) { return ParseValue(text); }

std::string LimitFlagsHelp() {
  std::string out;
  for (const LimitFlag& f : LimitFlags()) {
    absl::StrAppendFormat(&out, "  %-28s default %-14d %s\n", base::AbslView(f.name),
                          f.default_value, base::AbslView(f.help));
  }
  return out;
}

}  // namespace ckptscan::app
