// Text rules for JSON we read and write: UTF-8 validity as strict JSON readers check it, and
// string literals written the way serde_json (safetensors' reference) writes them, so that our
// deterministic writers (safetensors headers, signature statements) agree byte for byte.
#ifndef CKPTSCAN_BASE_JSON_TEXT_H_
#define CKPTSCAN_BASE_JSON_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptscan::base {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points past U+10FFFF are malformed, as in Rust's str::from_utf8), or
// nullopt when `s` is valid UTF-8.
std::optional<size_t> FirstInvalidUtf8(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return !FirstInvalidUtf8(s).has_value(); }

// Appends code point `cp` (at most U+10FFFF) as UTF-8; a surrogate is encoded as is (as
// Python's surrogatepass does), so callers that must not write one replace it first.
void AppendUtf8(std::string* out, uint32_t cp);

// Appends `s` as a JSON string literal the way serde_json writes it: `"` and `\` escaped,
// \b \f \n \r \t, other C0 controls as \u00xx (lowercase hex), everything else verbatim.
// `s` must be valid UTF-8.
void AppendJsonString(std::string* out, std::string_view s);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_JSON_TEXT_H_
