// JSON as Python's json.loads(bytes) reads it (CPython 3.11 and 3.13, the C scanner of
// Modules/_json.c behind json/decoder.py): the reading of every JSON document a Python
// consumer loads (transformers' config.json and index files, Keras's config.json).
//
// What differs from strict JSON (RFC 8259, nlohmann-json's strict mode), all as Python does:
//   - the encoding is detected from the first bytes (json.detect_encoding): a UTF-8 BOM is
//     skipped, UTF-16 and UTF-32 (with a BOM, or told by the NUL bytes of the first four) are
//     decoded, and the whole input is decoded before parsing with `surrogatepass` (UTF-8
//     encoded surrogates and lone UTF-16 surrogates are text);
//   - NaN, Infinity and -Infinity are numbers;
//   - a repeated key is no error (the caller applies Python's rule: the last value wins);
//   - a \u escape of a lone surrogate is text (lone surrogates reach the sink as U+FFFD: no
//     name that matters can hold one);
//   - an integer of more than 4,300 digits is refused (int()'s default limit on decimal text,
//     sys.get_int_max_str_digits()), a float of any size is not (1e999999 is inf).
// Nesting is bounded by the caller's `max_depth` on an explicit stack (Python stops near its
// recursion limit, about 1,000: deeper documents are refused here sooner, never accepted).
//
// Thread-safe: pure functions; the sink is called on the caller's thread.
#ifndef CKPTSCAN_BASE_JSON_PYTHON_H_
#define CKPTSCAN_BASE_JSON_PYTHON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ckptscan::base {

// The codec json.loads picks for bytes (json.detect_encoding).
enum class JsonEncoding : uint8_t {
  kUtf8,      // 'utf-8'
  kUtf8Bom,   // 'utf-8-sig': EF BB BF skipped
  kUtf16Bom,  // 'utf-16': FF FE (little-endian) or FE FF (big-endian), skipped
  kUtf16Le,   // 'utf-16-le'
  kUtf16Be,   // 'utf-16-be'
  kUtf32Bom,  // 'utf-32': FF FE 00 00 or 00 00 FE FF, skipped
  kUtf32Le,   // 'utf-32-le'
  kUtf32Be,   // 'utf-32-be'
};

JsonEncoding DetectJsonEncoding(std::string_view bytes);
// Python's codec name ("utf-8-sig", ...).
const char* JsonEncodingName(JsonEncoding e);

// Int: -?(0|[1-9][0-9]*) of at most kMaxIntDigits digits. Float: with a fraction or an
// exponent. The three constants are Python's only non-JSON numbers.
struct JsonNumber {
  enum class Kind : uint8_t { kInt, kFloat, kNaN, kInfinity, kNegativeInfinity };
  Kind kind = Kind::kInt;
  std::string_view text;  // the token, ASCII
  // kInt that is not negative and fits 64 bits.
  std::optional<uint64_t> unsigned_value;
};

// int()'s default limit on the digits of decimal text (Python >= 3.11).
inline constexpr size_t kMaxIntDigits = 4300;

// Receives a document's values in order. Offsets are byte offsets in the input bytes (the
// BOM included): an object's or array's bracket, a string's or key's opening quote, a
// scalar's first byte. A non-OK status stops the parse and is returned as is. Text is UTF-8.
class JsonSink {
 public:
  virtual ~JsonSink() = default;
  virtual absl::Status StartObject(uint64_t offset) = 0;
  virtual absl::Status Key(std::string key, uint64_t offset) = 0;
  virtual absl::Status EndObject(uint64_t offset) = 0;
  virtual absl::Status StartArray(uint64_t offset) = 0;
  virtual absl::Status EndArray(uint64_t offset) = 0;
  virtual absl::Status String(std::string value, uint64_t offset) = 0;
  virtual absl::Status Number(const JsonNumber& number, uint64_t offset) = 0;
  virtual absl::Status Bool(bool value, uint64_t offset) = 0;
  virtual absl::Status Null(uint64_t offset) = 0;
};

// Reads one document. InvalidArgument (what json.loads raises: a decoding error, a syntax
// error, an integer over kMaxIntDigits), LimitError "max_json_depth" for nesting deeper than
// `max_depth`, or the sink's status; *error_offset is the byte where it stopped.
absl::Status ParsePythonJson(std::string_view bytes, uint32_t max_depth, JsonSink* sink,
                             uint64_t* error_offset);

// Whether the document's first character, after the encoding's BOM and JSON white space, is
// '{' (cheap: reads only as far as that character).
bool StartsWithJsonObject(std::string_view bytes);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_JSON_PYTHON_H_
