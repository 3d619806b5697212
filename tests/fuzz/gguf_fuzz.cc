// libFuzzer target: the strict GGUF reader (core/gguf/gguf.h).
//
// Invariants: a failure is InvalidArgument, ResourceExhausted (a named limit) or Unimplemented,
// and points at an offset inside the input; an accepted file has version 2 or 3, a power-of-two
// alignment, a data section that starts aligned (when there are tensors) inside the file, and
// tensors that lie in order, each at the previous one's end rounded up to the alignment, inside
// the file, with nbytes = elements / block elements * block bytes of a known ggml type and at
// most 4 dimensions; every template is a view of the input at its offset; anomalies lie inside
// the input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/gguf/gguf.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr size_t kMaxInputBytes = 256 << 10;

ckptscan::gguf::Limits SmallLimits() {
  ckptscan::gguf::Limits l;
  l.max_kv = 4096;
  l.max_tensors = 4096;
  l.max_string_bytes = kMaxInputBytes;
  l.max_array_elements = 1 << 20;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const gguf::Limits limits = SmallLimits();
  uint64_t at = 0;
  const absl::StatusOr<gguf::File> f = gguf::Read(bytes, limits, &at);
  if (!f.ok()) {
    const absl::StatusCode code = f.status().code();
    CKPT_FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                        code == absl::StatusCode::kResourceExhausted ||
                        code == absl::StatusCode::kUnimplemented,
                    "%s", f.status().ToString().c_str());
    CKPT_FUZZ_CHECK(at <= size, "error offset %llu of %zu bytes", (unsigned long long)at, size);
    return 0;
  }
  CKPT_FUZZ_CHECK(f->version == 2 || f->version == 3, "version %u", f->version);
  CKPT_FUZZ_CHECK(f->alignment != 0 && (f->alignment & (f->alignment - 1)) == 0, "alignment %llu",
                  (unsigned long long)f->alignment);
  CKPT_FUZZ_CHECK(f->data_start <= size && f->data_start <= f->data_end && f->data_end <= size,
                  "data [%llu, %llu) of %zu", (unsigned long long)f->data_start,
                  (unsigned long long)f->data_end, size);
  if (!f->tensors.empty()) {
    CKPT_FUZZ_CHECK(f->data_start % f->alignment == 0, "data_start %llu unaligned",
                    (unsigned long long)f->data_start);
  }
  uint64_t expected = f->data_start;
  for (const gguf::Tensor& t : f->tensors) {
    const gguf::GgmlType* type = gguf::FindGgmlType(t.type);
    CKPT_FUZZ_CHECK(type != nullptr, "%s: type %u", t.name.c_str(), t.type);
    CKPT_FUZZ_CHECK(t.dims.size() <= 4, "%s: %zu dims", t.name.c_str(), t.dims.size());
    CKPT_FUZZ_CHECK(!t.name.empty() && t.name.size() < 64, "name of %zu bytes", t.name.size());
    unsigned __int128 numel = 1;
    for (uint64_t d : t.dims) numel *= d;
    CKPT_FUZZ_CHECK(numel % type->block_elements == 0, "%s: partial block", t.name.c_str());
    CKPT_FUZZ_CHECK(numel / type->block_elements * type->block_bytes == t.nbytes, "%s: nbytes %llu",
                    t.name.c_str(), (unsigned long long)t.nbytes);
    CKPT_FUZZ_CHECK(t.offset == expected && t.offset <= size && t.nbytes <= size - t.offset,
                    "%s: [%llu, +%llu) expected at %llu in %zu", t.name.c_str(),
                    (unsigned long long)t.offset, (unsigned long long)t.nbytes,
                    (unsigned long long)expected, size);
    const uint64_t padded = (t.nbytes + f->alignment - 1) / f->alignment * f->alignment;
    expected = t.offset + padded;
  }
  for (const gguf::Template& t : f->templates) {
    CKPT_FUZZ_CHECK(t.offset <= size && t.text.size() <= size - t.offset &&
                        t.text.data() == bytes.data() + t.offset,
                    "template %s not a view at its offset", t.key.c_str());
  }
  for (const gguf::Anomaly& a : f->anomalies) {
    CKPT_FUZZ_CHECK(a.offset <= size, "anomaly %s at %llu", a.kind.c_str(),
                    (unsigned long long)a.offset);
  }
  return 0;
}
