// Text rules shared by the safetensors validator and writer (internal to core/safetensors).
#ifndef CKPTSCAN_CORE_SAFETENSORS_TEXT_H_
#define CKPTSCAN_CORE_SAFETENSORS_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptscan::safetensors::internal {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points past U+10FFFF are malformed, as in Rust's str::from_utf8), or
// nullopt when `s` is valid UTF-8.
std::optional<size_t> FirstInvalidUtf8(std::string_view s);

// Why `name` cannot be a tensor name in a strict file, or nullopt when it can: empty, invalid
// UTF-8, a C0 control character or DEL (NUL hides tensors from C-string scanners), or the
// reserved key "__metadata__".
std::optional<std::string> TensorNameProblem(std::string_view name);

// Appends `s` as a JSON string literal the way serde_json writes it: `"` and `\` escaped,
// \b \f \n \r \t, other C0 controls as \u00xx (lowercase hex), everything else verbatim.
void AppendJsonString(std::string* out, std::string_view s);

}  // namespace ckptscan::safetensors::internal

#endif  // CKPTSCAN_CORE_SAFETENSORS_TEXT_H_
