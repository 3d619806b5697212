#include "base/escape.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace ckptscan::base {
namespace {

bool IsInvisible(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2069) || cp == 0xfeff ||
         // Characters that render as nothing, so that two different names look the same: soft
         // hyphen, combining grapheme joiner, Hangul and Khmer fillers, Mongolian selectors and
         // vowel separator, variation selectors, interlinear annotations, musical formatting,
         // and the tag characters ("ASCII smuggling").
         cp == 0x00ad || cp == 0x034f || cp == 0x115f || cp == 0x1160 || cp == 0x17b4 ||
         cp == 0x17b5 || (cp >= 0x180b && cp <= 0x180f) || cp == 0x3164 ||
         (cp >= 0xfe00 && cp <= 0xfe0f) || cp == 0xffa0 || (cp >= 0xfff9 && cp <= 0xfffb) ||
         (cp >= 0x1d173 && cp <= 0x1d17a) || (cp >= 0xe0000 && cp <= 0xe007f) ||
         (cp >= 0xe0100 && cp <= 0xe01ef);
}

}  // namespace

void AppendEscaped(std::string* out, std::string_view s, EscapeOptions options) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n') {
        *out += "\\n";
      } else if (c == '\r') {
        *out += "\\r";
      } else if (c == '\t') {
        *out += "\\t";
      } else if (c == '\\' && options.escape_backslash) {
        *out += "\\\\";
      } else if (c < 0x20 || c == 0x7f) {
        absl::StrAppendFormat(out, "\\x%02x", c);
      } else {
        out->push_back(static_cast<char>(c));
      }
      ++i;
      continue;
    }
    // One multi-byte sequence: only well-formed UTF-8 without surrogates is copied.
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && len <= n - i;
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      absl::StrAppendFormat(out, "\\x%02x", c);
      ++i;
      continue;
    }
    if (options.escape_invisible && IsInvisible(cp)) {
      absl::StrAppendFormat(out, "\\u{%x}", cp);
    } else {
      out->append(s.substr(i, len));
    }
    i += len;
  }
}

std::string Quoted(std::string_view s, size_t max_bytes) {
  std::string out = "\"";
  AppendEscaped(&out, s.substr(0, max_bytes),
                EscapeOptions{.escape_backslash = true, .escape_invisible = true});
  if (s.size() > max_bytes) out += "...";
  out += '"';
  return out;
}

std::string Escaped(std::string_view s, EscapeOptions options) {
  std::string out;
  out.reserve(s.size());
  AppendEscaped(&out, s, options);
  return out;
}

}  // namespace ckptscan::base
