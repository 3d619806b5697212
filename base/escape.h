// Escaping of untrusted text (names and strings from scanned files) for reports and terminals.
//
// The result is valid UTF-8 on one line: well-formed sequences are copied; \n, \r, \t become
// two-character escapes; other control characters and every malformed byte (lone surrogates,
// overlongs, truncated sequences) become \xNN.
#ifndef CKPTSCAN_BASE_ESCAPE_H_
#define CKPTSCAN_BASE_ESCAPE_H_

#include <string>
#include <string_view>

namespace ckptscan::base {

struct EscapeOptions {
  // Escape '\' as "\\" (off for text that is already escaped).
  bool escape_backslash = true;
  // Escape C1 controls and invisible format characters (bidi overrides, zero-width, BOM) as
  // \u{X}, so that a file name cannot rearrange or hide what a terminal shows.
  bool escape_invisible = false;
};

void AppendEscaped(std::string* out, std::string_view s, EscapeOptions options = {});
std::string Escaped(std::string_view s, EscapeOptions options = {});

// A name from a scanned file for a message: its first `max_bytes` bytes escaped (backslashes and
// invisible characters too) between double quotes, "..." after them when it was longer.
std::string Quoted(std::string_view s, size_t max_bytes = 120);

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_ESCAPE_H_
