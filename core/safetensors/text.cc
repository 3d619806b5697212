#include "core/safetensors/text.h"

#include "base/json_text.h"

namespace ckptscan::safetensors::internal {

std::optional<std::string> TensorNameProblem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (auto bad = base::FirstInvalidUtf8(name)) {
    return "is not valid UTF-8 (byte " + std::to_string(*bad) + " of the name)";
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      return "contains control character " + std::to_string(c) + " at byte " + std::to_string(i) +
             " of the name";
    }
  }
  if (name == "__metadata__") return "is the reserved key __metadata__";
  return std::nullopt;
}

}  // namespace ckptscan::safetensors::internal
