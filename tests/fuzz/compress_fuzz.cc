// libFuzzer target: joblib's decompression (core/compress/decompress.h), every codec, both
// stream modes, on the input as it is and with each codec's joblib prefix put in front.
//
// Invariants: decompression is deterministic; the status is OK (stops are in the result); the
// output never exceeds max_decompressed_bytes; kClean has an OK stop and kLimit a named limit;
// offsets lie inside the input; trailing bytes end at the end of the input; in kJoblib mode a
// zlib/gzip result is a prefix of the kAll result (the first stream comes first).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/limit_status.h"
#include "core/compress/decompress.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

constexpr size_t kMaxInputBytes = 64 << 10;

ckptscan::compress::Limits SmallLimits() {
  ckptscan::compress::Limits l;
  l.max_decompressed_bytes = 4 << 20;
  l.max_compression_ratio = 1100;
  l.max_decoder_memory = 64 << 20;
  return l;
}

void Check(std::string_view bytes, ckptscan::compress::Codec codec,
           ckptscan::compress::Streams streams, const ckptscan::compress::Limits& limits,
           std::string* out) {
  using namespace ckptscan::compress;
  absl::StatusOr<Decompressed> d = DecompressJoblib(bytes, codec, limits, streams);
  CKPT_FUZZ_CHECK(d.ok(), "decoder set-up failed: %s", d.status().ToString().c_str());
  absl::StatusOr<Decompressed> again = DecompressJoblib(bytes, codec, limits, streams);
  CKPT_FUZZ_CHECK(again.ok() && again->bytes == d->bytes && again->end == d->end &&
                      again->stop_offset == d->stop_offset,
                  "not deterministic");
  CKPT_FUZZ_CHECK(d->bytes.size() <= limits.max_decompressed_bytes, "%zu bytes out",
                  d->bytes.size());
  CKPT_FUZZ_CHECK((d->end == End::kClean) == d->stop.ok(), "end and stop disagree: %s",
                  d->stop.ToString().c_str());
  if (d->end == End::kLimit) {
    CKPT_FUZZ_CHECK(ckptscan::base::LimitOf(d->stop).has_value(), "unnamed limit: %s",
                    d->stop.ToString().c_str());
  }
  CKPT_FUZZ_CHECK(d->stop_offset <= bytes.size(), "stop offset %llu past %zu",
                  static_cast<unsigned long long>(d->stop_offset), bytes.size());
  if (d->trailing_bytes > 0) {
    CKPT_FUZZ_CHECK(d->end == End::kClean &&
                        d->trailing_offset + d->trailing_bytes == bytes.size(),
                    "trailing bytes do not end the input");
  }
  *out = std::move(d->bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan::compress;
  if (size > kMaxInputBytes) return -1;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static const Limits limits = SmallLimits();
  const std::string prefixes[] = {"", "\x78", "\x1f\x8b", "BZ", std::string("\x5d\x00", 2),
                                  "\xfd\x37\x7a\x58\x5a", "\x04\x22\x4d\x18"};
  for (const std::string& prefix : prefixes) {
    const std::string bytes = prefix + std::string(input);
    for (Codec codec : {Codec::kZlib, Codec::kGzip, Codec::kBz2, Codec::kLzma, Codec::kXz,
                        Codec::kLz4}) {
      if (!prefix.empty() && DetectJoblibCodec(bytes) != codec) continue;
      std::string first;
      std::string all;
      Check(bytes, codec, Streams::kJoblib, limits, &first);
      Check(bytes, codec, Streams::kAll, limits, &all);
      CKPT_FUZZ_CHECK(all.substr(0, first.size()) == first,
                      "the joblib reading is not a prefix of every stream's");
    }
  }
  return 0;
}
