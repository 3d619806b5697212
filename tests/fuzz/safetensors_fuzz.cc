// libFuzzer target: the strict safetensors validator (core/safetensors/validator.h), whole
// file and header-only.
//
// Invariants: a Layout the validator accepts is what its header says and fits the file: data
// starts at 8 + N, the tensors tile the data buffer in order, gapless to the end of the file,
// each with exactly numel * dtype-size bytes, within the rank limit; ValidateHeader on the same
// file (given only the header) agrees with Validate.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/safetensors/dtype.h"
#include "core/safetensors/validator.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// Headers are JSON text; 64 KiB holds a few hundred tensors.
constexpr size_t kMaxInputBytes = 64 << 10;

ckptscan::safetensors::ValidatorLimits SmallLimits() {
  ckptscan::safetensors::ValidatorLimits l;
  l.max_header_bytes = kMaxInputBytes;
  l.max_tensors = 1000;
  l.max_rank = 16;
  l.max_metadata_entries = 1000;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const safetensors::ValidatorLimits limits = SmallLimits();

  const absl::StatusOr<safetensors::Layout> layout = safetensors::Validate(bytes, limits);
  // The header alone (when the length prefix says where it ends) must give the same answer.
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n <= size - 8) {
      const absl::StatusOr<safetensors::Layout> header =
          safetensors::ValidateHeader(bytes.substr(0, 8 + n), size, limits);
      CKPT_FUZZ_CHECK(header.ok() == layout.ok(), "Validate: %s, ValidateHeader: %s",
                      layout.status().ToString().c_str(), header.status().ToString().c_str());
      if (header.ok()) {
        CKPT_FUZZ_CHECK(header->tensors.size() == layout->tensors.size(),
                        "ValidateHeader: %zu tensors, Validate: %zu", header->tensors.size(),
                        layout->tensors.size());
      }
    }
  }
  if (!layout.ok()) {
    CKPT_FUZZ_CHECK(layout.status().code() == absl::StatusCode::kInvalidArgument ||
                        layout.status().code() == absl::StatusCode::kResourceExhausted,
                    "%s", layout.status().ToString().c_str());
    return 0;
  }
  CKPT_FUZZ_CHECK(layout->file_size == size, "file_size %llu",
                  (unsigned long long)layout->file_size);
  CKPT_FUZZ_CHECK(
      layout->header_length <= size - 8 && layout->data_start == 8 + layout->header_length,
      "data_start %llu, N %llu", (unsigned long long)layout->data_start,
      (unsigned long long)layout->header_length);
  CKPT_FUZZ_CHECK(layout->tensors.size() <= limits.max_tensors, "%zu tensors",
                  layout->tensors.size());
  uint64_t prev_end = layout->data_start;
  for (const safetensors::TensorLayout& t : layout->tensors) {
    CKPT_FUZZ_CHECK(t.begin == prev_end && t.begin <= t.end && t.end <= size,
                    "%s: [%llu, %llu) after %llu in %zu bytes", t.name.c_str(),
                    (unsigned long long)t.begin, (unsigned long long)t.end,
                    (unsigned long long)prev_end, size);
    prev_end = t.end;
    CKPT_FUZZ_CHECK(t.shape.size() <= limits.max_rank, "%s: rank %zu", t.name.c_str(),
                    t.shape.size());
    unsigned __int128 bits = safetensors::DtypeBits(t.dtype);
    for (uint64_t d : t.shape) bits *= d;
    CKPT_FUZZ_CHECK(bits == (unsigned __int128)(t.end - t.begin) * 8, "%s: size mismatch",
                    t.name.c_str());
  }
  CKPT_FUZZ_CHECK(prev_end == size, "the tensors end at %llu of %zu bytes",
                  (unsigned long long)prev_end, size);
  return 0;
}
