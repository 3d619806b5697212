#include "pipeline/extract_facts.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/strings.h"

namespace ckptscan::pipeline {
namespace {


// A container recognised by its leading bytes. None of them is scanned yet:
// fail closed.
struct Magic {
  std::string_view bytes;
  std::string_view format;
  std::string_view message;
};

constexpr std::string_view kCompressed =
    "compressed files are not scanned; decompress it and scan the contents";

constexpr Magic kMagics[] = {
    {{"PK\x03\x04", 4},
     "zip",
     "torch zip archives are scanned in a later release"},
    {{"\x1f\x8b", 2}, "gzip", kCompressed},
    {{"\x37\x7a\xbc\xaf\x27\x1c", 6}, "7z", "7z archives are not scanned"},
    {{"Rar!\x1a\x07", 6}, "rar", "rar archives are not scanned"},
    {{"\xfd\x37\x7a\x58\x5a\x00", 6}, "xz", kCompressed},
    {{"\x28\xb5\x2f\xfd", 4}, "zstd", kCompressed},
    {{"\x04\x22\x4d\x18", 4}, "lz4", kCompressed},
};

bool IsBzip2(std::string_view b) {
  return b.size() >= 4 && b.substr(0, 3) == "BZh" && b[3] >= '1' && b[3] <= '9';
}

// Python's tarfile (which torch's legacy loader tries first) accepts a file
// whose first 512-byte block is not all NUL and carries a valid header
// checksum, whatever its magic. Such a file is loaded as a tar of pickles, so
// it must never be judged as a raw pickle.
bool IsTar(std::string_view b) {
  constexpr size_t kBlock = 512;
  if (b.size() < kBlock) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(b.data());
  bool all_nul = true;
  int64_t unsigned_sum = 8 * ' ';
  int64_t signed_sum = 8 * ' ';
  for (size_t i = 0; i < kBlock; ++i) {
    if (u[i] != 0) all_nul = false;
    if (i >= 148 && i < 156) continue;  // the checksum field counts as spaces
    unsigned_sum += u[i];
    signed_sum += static_cast<signed char>(u[i]);
  }
  if (all_nul) return false;

  std::string_view field = b.substr(148, 8);
  int64_t value = 0;
  if (u[148] == 0x80 ||
      u[148] == 0xff) {  // base-256 (GNU); tarfile.nti accepts it
    for (size_t i = 1; i < field.size(); ++i) value = (value << 8) | u[148 + i];
    if (u[148] == 0xff) value -= int64_t{1} << 56;
  } else {
    // tarfile.nti: up to the first NUL, stripped, int(s, 8) (sign, "0o" and '_'
    // allowed).
    field = field.substr(0, std::min(field.find('\0'), field.size()));
    while (!field.empty() &&
           std::isspace(static_cast<unsigned char>(field.front()))) {
      field.remove_prefix(1);
    }
    while (!field.empty() &&
           std::isspace(static_cast<unsigned char>(field.back()))) {
      field.remove_suffix(1);
    }
    bool negative = false;
    if (!field.empty() && (field[0] == '+' || field[0] == '-')) {
      negative = field[0] == '-';
      field.remove_prefix(1);
    }
    if (field.size() >= 2 && field[0] == '0' &&
        (field[1] == 'o' || field[1] == 'O')) {
      field.remove_prefix(2);
    }
    bool digits = false;
    for (char c : field) {
      if (c == '_') continue;
      if (c < '0' || c > '7') return false;
      value = value * 8 + (c - '0');
      digits = true;
    }
    if (!digits) value = 0;
    if (negative) value = -value;
  }
  return value == unsigned_sum || value == signed_sum;
}

v1::ScanError UnsupportedError(std::string_view format,
                               std::string_view message) {
  v1::ScanError e;
  e.set_code("unsupported");
  e.set_message(
      absl::StrCat(base::AbslView(format), ": ", base::AbslView(message)));
  return e;
}

v1::ScanError MalformedError(std::string message) {
  v1::ScanError e;
  e.set_code("malformed");
  e.set_message(std::move(message));
  return e;
}

}  // namespace

FileFacts ExtractFacts(std::string_view bytes, const pickle::Limits& limits,
                       const pickle::TraceSink* trace) {
  FileFacts facts;
  if (bytes.empty()) {
    facts.format = "empty";
    facts.errors.push_back(
        MalformedError("empty file: there is no pickle to verify"));
    return facts;
  }
  for (const Magic& m : kMagics) {
    if (bytes.substr(0, m.bytes.size()) == m.bytes) {
      facts.format = std::string(m.format);
      facts.errors.push_back(UnsupportedError(m.format, m.message));
      return facts;
    }
  }
  if (IsBzip2(bytes)) {
    facts.format = "bzip2";
    facts.errors.push_back(UnsupportedError("bzip2", kCompressed));
    return facts;
  }
  if (IsTar(bytes)) {
    facts.format = "tar";
    facts.errors.push_back(
        UnsupportedError("tar",
                         "legacy torch tar archives are not scanned "
                         "(torch.load would unpack it)"));
    return facts;
  }
  facts.format = "pickle";
  MemberFacts member;
  member.stream =
      pickle::Vm(limits).ScanStream(bytes, /*base_offset=*/0, trace);
  facts.members.push_back(std::move(member));
  return facts;
}

}  // namespace ckptscan::pipeline
