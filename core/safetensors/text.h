// Text rules shared by the safetensors validator and writer (internal to core/safetensors).
#ifndef CKPTSCAN_CORE_SAFETENSORS_TEXT_H_
#define CKPTSCAN_CORE_SAFETENSORS_TEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptscan::safetensors::internal {

// Why `name` cannot be a tensor name in a strict file, or nullopt when it can: empty, invalid
// UTF-8, a C0 control character or DEL (NUL hides tensors from C-string scanners), or the
// reserved key "__metadata__".
std::optional<std::string> TensorNameProblem(std::string_view name);

}  // namespace ckptscan::safetensors::internal

#endif  // CKPTSCAN_CORE_SAFETENSORS_TEXT_H_
