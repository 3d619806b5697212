// Debian's Abseil is built with its own absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0),
// which does not convert from std::string_view. Our code uses std::string_view; these bridge
// the two at absl call sites (StrCat, StrFormat %s, Status messages).
#ifndef CKPTSCAN_BASE_STRINGS_H_
#define CKPTSCAN_BASE_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace ckptscan::base {

inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view StdView(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_STRINGS_H_
