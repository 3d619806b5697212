// libFuzzer target: the torch-faithful zip reader (core/zip/zip_reader.h), in both modes:
// Open, then every lookup and read torch's loader would make.
//
// Invariants: Open is deterministic; entries are in directory order and within the limits;
// every entry is found again by its own name (ASCII case-insensitively, as miniz compares);
// a STORED member is a view inside the file; a read never returns more than declared;
// AllRecords, when it succeeds, names every entry.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "core/zip/zip_reader.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Zip tricks need a directory, a few members and some slack; the fixtures are at most ~20 KiB.
constexpr size_t kMaxInputBytes = 256 << 10;
// Members read per input: bounds the work of archives with thousands of overlapping entries.
constexpr size_t kMaxReads = 64;

ckptscan::zip::Limits SmallLimits() {
  ckptscan::zip::Limits l;
  l.max_entries = 1024;
  l.max_name_bytes = 1024;
  l.max_central_directory_bytes = 256 << 10;
  l.max_member_bytes = 4 << 20;
  l.max_compression_ratio = 200;
  l.max_total_uncompressed = 64 << 20;
  l.max_anomalies_per_kind = 8;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const zip::Limits limits = SmallLimits();

  for (zip::Mode mode : {zip::Mode::kTorch, zip::Mode::kZipfile}) {
    absl::StatusOr<zip::Archive> ar = zip::Archive::Open(bytes, limits, mode);
    absl::StatusOr<zip::Archive> again = zip::Archive::Open(bytes, limits, mode);
    CKPT_FUZZ_CHECK(ar.ok() == again.ok(), "Open is not deterministic");
    if (!ar.ok()) {
      CKPT_FUZZ_CHECK(ar.status().code() == absl::StatusCode::kInvalidArgument ||
                          ar.status().code() == absl::StatusCode::kResourceExhausted,
                      "Open failed with %s", ar.status().ToString().c_str());
      continue;
    }
    CKPT_FUZZ_CHECK(ar->entries().size() == again->entries().size() &&
                        ar->anomalies().size() == again->anomalies().size(),
                    "Open is not deterministic");
    CKPT_FUZZ_CHECK(ar->entries().size() <= limits.max_entries, "%zu entries",
                    ar->entries().size());
    if (mode == zip::Mode::kZipfile) {
      CKPT_FUZZ_CHECK(ar->prefix().empty(), "zipfile mode with a prefix");
    }
    for (const zip::Anomaly& a : ar->anomalies()) {
      CKPT_FUZZ_CHECK(!zip::AnomalyKindName(a.kind).empty(), "unnamed anomaly kind");
    }
    size_t reads = 0;
    for (size_t i = 0; i < ar->entries().size(); ++i) {
      const zip::Entry& e = ar->entries()[i];
      CKPT_FUZZ_CHECK(e.index == i, "entry %zu has index %u", i, e.index);
      CKPT_FUZZ_CHECK(e.name.size() <= limits.max_name_bytes, "entry %zu: %zu-byte name", i,
                      e.name.size());
      if (e.name.find('\0') == std::string::npos) {
        const zip::Entry* found = ar->Locate(e.name);
        CKPT_FUZZ_CHECK(found != nullptr, "entry %zu is not found by its own name", i);
        CKPT_FUZZ_CHECK(absl::EqualsIgnoreCase(found->name, e.name),
                        "entry %zu found as another name", i);
      }
      if (reads++ >= kMaxReads) continue;
      absl::StatusOr<zip::Member> m = ar->Read(e);
      if (!m.ok()) continue;
      const std::string_view got = m->bytes();
      CKPT_FUZZ_CHECK(got.size() <= m->declared_size(), "entry %zu: %zu bytes, %llu declared", i,
                      got.size(), (unsigned long long)m->declared_size());
      if (e.method == 0 && !got.empty()) {  // STORED: a view of the file
        CKPT_FUZZ_CHECK(
            got.data() >= bytes.data() && got.data() + got.size() <= bytes.data() + bytes.size(),
            "entry %zu: a STORED member outside the file", i);
      }
      if (e.method == 8) {
        CKPT_FUZZ_CHECK(got.size() <= limits.max_member_bytes, "entry %zu: inflated %zu", i,
                        got.size());
      }
    }
    (void)ar->Version();
    (void)ar->ReadRecord("data.pkl");
    absl::StatusOr<std::vector<std::string>> records = ar->AllRecords();
    if (records.ok()) {
      CKPT_FUZZ_CHECK(records->size() == ar->entries().size(), "%zu records for %zu entries",
                      records->size(), ar->entries().size());
    }
  }
  return 0;
}
