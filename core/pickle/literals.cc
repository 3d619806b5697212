#include "core/pickle/literals.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/strings.h"

namespace ckptscan::pickle {
namespace {

constexpr size_t kMaxStrDigits = 4300;  // sys.int_info.default_max_str_digits

// Py_ISSPACE: the ASCII whitespace set of pyctype.
bool PyIsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}
// C isspace in the "C" locale (what strtol skips): the same six characters.
bool CIsSpace(char c) { return PyIsSpace(c); }

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

// The string up to (not including) the first NUL: what C string functions see.
std::string_view CStr(std::string_view s) {
  size_t nul = s.find('\0');
  return nul == std::string_view::npos ? s : s.substr(0, nul);
}

absl::Status BadInt(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid literal for int(): ", base::AbslView(what)));
}

std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    }
  }
  if (s.size() > 40) out += "...";
  return out;
}

std::string Int128ToString(absl::int128 v) {
  // absl::int128 has operator<< but no StrCat overload in this absl version.
  bool neg = v < 0;
  absl::uint128 u = neg ? absl::uint128(-(v + 1)) + 1 : absl::uint128(v);
  std::string digits;
  do {
    digits.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  } while (u != 0);
  if (neg) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

}  // namespace

absl::StatusOr<IntValue> PyLongFromString(std::string_view cstr, int base) {
  const std::string_view whole = cstr;
  size_t i = 0;
  const size_t n = cstr.size();
  while (i < n && PyIsSpace(cstr[i])) ++i;
  bool neg = false;
  if (i < n && (cstr[i] == '+' || cstr[i] == '-')) {
    neg = cstr[i] == '-';
    ++i;
  }
  auto at = [&](size_t k) -> char { return k < n ? cstr[k] : '\0'; };
  bool error_if_nonzero = false;
  if (base == 0) {
    if (at(i) != '0') {
      base = 10;
    } else if (at(i + 1) == 'x' || at(i + 1) == 'X') {
      base = 16;
    } else if (at(i + 1) == 'o' || at(i + 1) == 'O') {
      base = 8;
    } else if (at(i + 1) == 'b' || at(i + 1) == 'B') {
      base = 2;
    } else {
      error_if_nonzero = true;
      base = 10;
    }
  }
  if (at(i) == '0' && ((base == 16 && (at(i + 1) == 'x' || at(i + 1) == 'X')) ||
                       (base == 8 && (at(i + 1) == 'o' || at(i + 1) == 'O')) ||
                       (base == 2 && (at(i + 1) == 'b' || at(i + 1) == 'B')))) {
    i += 2;
    if (at(i) == '_') ++i;  // one underscore allowed after the prefix
  }
  if (at(i) == '_') return BadInt(Printable(whole));

  absl::uint128 mag = 0;
  bool fits = true;
  size_t digits = 0;
  bool prev_underscore = false;
  bool nonzero = false;
  size_t digits_start = i;
  for (; i < n; ++i) {
    char c = cstr[i];
    if (c == '_') {
      if (prev_underscore) return BadInt(Printable(whole));
      prev_underscore = true;
      continue;
    }
    int d = DigitValue(c);
    if (d >= base) break;
    prev_underscore = false;
    ++digits;
    if (d != 0) nonzero = true;
    if (fits) {
      absl::uint128 next = mag * static_cast<unsigned>(base) + static_cast<unsigned>(d);
      // Keep the magnitude within what int128 can represent (2^127 for negatives).
      if ((next - static_cast<unsigned>(d)) / static_cast<unsigned>(base) != mag ||
          next > (absl::uint128(1) << 127)) {
        fits = false;
      } else {
        mag = next;
      }
    }
  }
  if (digits == 0 || prev_underscore) return BadInt(Printable(whole));
  if (error_if_nonzero && nonzero) return BadInt(Printable(whole));
  if (base == 10 && digits > kMaxStrDigits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("int literal has %d digits, over CPython's limit of %d", digits,
                        kMaxStrDigits));
  }
  while (i < n && PyIsSpace(cstr[i])) ++i;
  if (i != n) return BadInt(Printable(whole));

  IntValue out;
  if (fits && !neg && mag == (absl::uint128(1) << 127)) fits = false;
  out.fits = fits;
  if (fits) {
    absl::int128 v = static_cast<absl::int128>(mag);
    out.value = neg ? -v : v;
    out.text = Int128ToString(out.value);
  } else {
    out.text = std::string(cstr.substr(digits_start, std::min<size_t>(cstr.size() - digits_start, 64)));
    if (cstr.size() - digits_start > 64) out.text.append("...");
  }
  return out;
}

absl::StatusOr<IntValue> ParseIntLine(std::string_view line) {
  if (line.size() < 2) return absl::InvalidArgumentError("pickle data was truncated");
  std::string_view s = CStr(line);
  // glibc strtol(s, &end, 0) in the C locale.
  size_t i = 0;
  const size_t n = s.size();
  while (i < n && CIsSpace(s[i])) ++i;
  bool neg = false;
  if (i < n && (s[i] == '+' || s[i] == '-')) {
    neg = s[i] == '-';
    ++i;
  }
  int base = 10;
  if (i < n && s[i] == '0') {
    if (i + 2 < n + 0 && (s[i + 1] == 'x' || s[i + 1] == 'X') && DigitValue(s[i + 2]) < 16) {
      base = 16;
      i += 2;
    } else {
      base = 8;
    }
  }
  size_t start_digits = i;
  absl::uint128 mag = 0;
  bool range_error = false;
  for (; i < n; ++i) {
    int d = DigitValue(s[i]);
    if (d >= base) break;
    mag = mag * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (mag > (absl::uint128(1) << 63)) range_error = true;  // keeps `mag` from wrapping
    if (range_error) mag = absl::uint128(1) << 64;
  }
  size_t end = i == start_digits ? 0 : i;  // no digits: endptr = start of string
  if (!neg && mag > absl::uint128(INT64_MAX)) range_error = true;
  char at_end = end < n ? s[end] : '\0';
  if (!range_error && (at_end == '\n' || at_end == '\0')) {
    IntValue out;
    int64_t x = neg ? -static_cast<int64_t>(static_cast<uint64_t>(mag) - 1) - 1
                    : static_cast<int64_t>(static_cast<uint64_t>(mag));
    if (mag == 0) x = 0;
    out.value = x;
    out.text = Int128ToString(out.value);
    if (line.size() == 3 && (x == 0 || x == 1)) {
      out.is_bool = true;
    }
    return out;
  }
  // Not a C long: CPython retries as a Python int literal (base 0).
  auto v = PyLongFromString(s, 0);
  if (!v.ok()) return absl::InvalidArgumentError("could not convert string to int");
  return v;
}

absl::StatusOr<IntValue> ParseLongLine(std::string_view line) {
  if (line.size() < 2) return absl::InvalidArgumentError("pickle data was truncated");
  std::string_view s = line;
  if (s[s.size() - 2] == 'L') s = s.substr(0, s.size() - 2);
  return PyLongFromString(CStr(s), 0);
}

absl::StatusOr<int64_t> ParseMemoIndexLine(std::string_view line) {
  if (line.size() < 2) return absl::InvalidArgumentError("pickle data was truncated");
  auto v = PyLongFromString(CStr(line), 10);
  if (!v.ok()) return v.status();
  if (!v->fits || v->value > absl::int128(INT64_MAX) || v->value < absl::int128(INT64_MIN)) {
    return absl::InvalidArgumentError("memo index does not fit in a C ssize_t");
  }
  return static_cast<int64_t>(v->value);
}

namespace {

// A double as PyOS_string_to_double (_Py_dg_strtod, _Py_parse_inf_or_nan) reads it from the
// start of `s`: no leading whitespace, a sign, digits with an optional point and exponent, or
// the words inf, infinity and nan in any case. `end` is where it stopped; `overflow` that the
// magnitude is out of range (the value is then +-HUGE_VAL).
struct ScannedDouble {
  double value = 0;
  size_t end = 0;
  bool overflow = false;
};

absl::StatusOr<ScannedDouble> ScanDouble(std::string_view s) {
  const size_t n = s.size();
  auto at = [&](size_t k) -> char { return k < n ? s[k] : '\0'; };
  ScannedDouble out;
  size_t i = 0;
  if (at(i) == '+' || at(i) == '-') ++i;
  size_t ndigits = 0;
  bool lz = false;
  while (at(i) == '0') {
    ++i;
    lz = true;
  }
  while (at(i) >= '0' && at(i) <= '9') {
    ++i;
    ++ndigits;
  }
  if (at(i) == '.') {
    ++i;
    while (at(i) >= '0' && at(i) <= '9') {
      if (at(i) != '0' || ndigits) ++ndigits;
      else lz = true;
      ++i;
    }
  }
  out.end = i;
  if (ndigits > 0 || lz) {
    if (at(i) == 'e' || at(i) == 'E') {
      size_t j = i + 1;
      if (at(j) == '+' || at(j) == '-') ++j;
      size_t ds = j;
      while (at(j) >= '0' && at(j) <= '9') ++j;
      if (j > ds) out.end = j;  // an exponent needs a digit, else it is not consumed
    }
    std::string text(s.substr(0, out.end));
    errno = 0;
    char* tail = nullptr;
    out.value = std::strtod(text.c_str(), &tail);
    out.overflow = errno == ERANGE && std::fabs(out.value) >= 1.0;
    return out;
  }
  // _Py_parse_inf_or_nan
  size_t j = 0;
  bool neg = false;
  if (at(j) == '-') {
    neg = true;
    ++j;
  } else if (at(j) == '+') {
    ++j;
  }
  auto match = [&](size_t k, std::string_view word) {
    if (k + word.size() > n) return false;
    for (size_t q = 0; q < word.size(); ++q) {
      char c = s[k + q];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[q]) return false;
    }
    return true;
  };
  if (match(j, "inf")) {
    j += 3;
    if (match(j, "inity")) j += 5;
    out.value = neg ? -HUGE_VAL : HUGE_VAL;
    out.end = j;
    return out;
  }
  if (match(j, "nan")) {
    out.value = neg ? -std::nan("") : std::nan("");
    out.end = j + 3;
    return out;
  }
  return absl::InvalidArgumentError("could not convert string to float");
}

// _Py_string_to_number_with_underscores: each '_' between two digits, then dropped. The
// text without underscores, or nullopt when one is misplaced.
std::optional<std::string> WithoutUnderscores(std::string_view s) {
  std::string out;
  char prev = '\0';
  for (char c : s) {
    const bool digit = c >= '0' && c <= '9';
    if (c == '_') {
      if (!(prev >= '0' && prev <= '9')) return std::nullopt;
    } else {
      if (prev == '_' && !digit) return std::nullopt;
      out.push_back(c);
    }
    prev = c;
  }
  if (prev == '_') return std::nullopt;
  return out;
}

}  // namespace

absl::StatusOr<double> ParseFloatLine(std::string_view line) {
  if (line.size() < 2) return absl::InvalidArgumentError("pickle data was truncated");
  const std::string_view s = CStr(line);
  CKPT_ASSIGN_OR_RETURN(ScannedDouble d, ScanDouble(s));
  if (d.overflow) return absl::InvalidArgumentError("value too large to convert to float");
  const char c = d.end < s.size() ? s[d.end] : '\0';
  if (c != '\n' && c != '\0') {
    return absl::InvalidArgumentError("could not convert string to float");
  }
  return d.value;
}

absl::StatusOr<double> PyFloatFromBytes(std::string_view s) {
  const absl::Status bad = absl::InvalidArgumentError(
      absl::StrCat("could not convert string to float: ", Printable(s)));
  std::optional<std::string> plain = std::string(s);
  if (s.find('_') != std::string_view::npos) plain = WithoutUnderscores(s);
  if (!plain.has_value()) return bad;
  std::string_view t = *plain;
  while (!t.empty() && PyIsSpace(t.front())) t.remove_prefix(1);
  while (!t.empty() && PyIsSpace(t.back())) t.remove_suffix(1);
  if (t.empty()) return bad;
  absl::StatusOr<ScannedDouble> d = ScanDouble(t);
  // A NUL ends the scan like any other character that is no part of a number.
  if (!d.ok() || d->end != t.size()) return bad;
  return d->value;  // out of range: inf, which float() returns
}

absl::StatusOr<IntValue> PyIntFromBytes(std::string_view s, int base) {
  if (s.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid literal for int(): ", Printable(s)));
  }
  return PyLongFromString(s, base);
}

IntValue IntFromTwosComplement(std::string_view bytes) {
  IntValue out;
  if (bytes.empty()) {
    out.text.push_back('0');
    return out;
  }
  bool neg = (static_cast<unsigned char>(bytes.back()) & 0x80) != 0;
  // Drop sign-extension bytes so that wide encodings of small values still fit.
  size_t len = bytes.size();
  const unsigned char ext = neg ? 0xff : 0x00;
  while (len > 1 && static_cast<unsigned char>(bytes[len - 1]) == ext &&
         ((static_cast<unsigned char>(bytes[len - 2]) & 0x80) == (ext & 0x80))) {
    --len;
  }
  if (len > 16) {
    out.fits = false;
    out.text = absl::StrFormat("<%d-byte integer>", bytes.size());
    return out;
  }
  absl::uint128 u = neg ? ~absl::uint128(0) : 0;
  for (size_t k = 0; k < len; ++k) {
    absl::uint128 byte = static_cast<unsigned char>(bytes[k]);
    u &= ~(absl::uint128(0xff) << (8 * k));
    u |= byte << (8 * k);
  }
  out.value = static_cast<absl::int128>(u);
  out.text = Int128ToString(out.value);
  return out;
}

absl::StatusOr<std::string> DecodeEscapedBytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    char c = s[i];
    if (c != '\\') {
      out.push_back(c);
      ++i;
      continue;
    }
    ++i;
    if (i == n) return absl::InvalidArgumentError("Trailing \\ in string");
    char e = s[i++];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\014'); break;
      case 't': out.push_back('\t'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 'v': out.push_back('\013'); break;
      case 'a': out.push_back('\007'); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        int v = e - '0';
        if (i < n && s[i] >= '0' && s[i] <= '7') {
          v = (v << 3) + (s[i++] - '0');
          if (i < n && s[i] >= '0' && s[i] <= '7') v = (v << 3) + (s[i++] - '0');
        }
        out.push_back(static_cast<char>(v & 0xff));
        break;
      }
      case 'x': {
        if (i + 1 < n && DigitValue(s[i]) < 16 && DigitValue(s[i + 1]) < 16) {
          out.push_back(static_cast<char>((DigitValue(s[i]) << 4) + DigitValue(s[i + 1])));
          i += 2;
          break;
        }
        return absl::InvalidArgumentError(
            absl::StrFormat("invalid \\x escape at position %d", i - 2));
      }
      default:
        out.push_back('\\');
        --i;  // the character after the backslash is kept as is
        break;
    }
  }
  return out;
}

namespace {
void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}
}  // namespace

std::string Latin1ToUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) AppendUtf8(&out, static_cast<unsigned char>(c));
  return out;
}

absl::StatusOr<std::string> DecodeRawUnicodeEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i++]);
    if (c != '\\') {
      AppendUtf8(&out, c);
      continue;
    }
    if (i >= n) {
      AppendUtf8(&out, c);
      continue;
    }
    unsigned char e = static_cast<unsigned char>(s[i++]);
    int count;
    if (e == 'u') {
      count = 4;
    } else if (e == 'U') {
      count = 8;
    } else {
      out.push_back('\\');
      AppendUtf8(&out, e);
      continue;
    }
    uint32_t cp = 0;
    for (; count > 0; --count, ++i) {
      if (i >= n) {
        return absl::InvalidArgumentError(e == 'u' ? "truncated \\uXXXX escape"
                                                   : "truncated \\UXXXXXXXX escape");
      }
      int d = DigitValue(s[i]);
      if (d >= 16) {
        return absl::InvalidArgumentError(e == 'u' ? "truncated \\uXXXX escape"
                                                   : "truncated \\UXXXXXXXX escape");
      }
      cp = (cp << 4) | static_cast<uint32_t>(d);
    }
    if (cp > 0x10ffff) return absl::InvalidArgumentError("\\Uxxxxxxxx out of range");
    AppendUtf8(&out, cp);
  }
  return out;
}

bool IsValidUtf8(std::string_view s, bool surrogatepass) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < static_cast<size_t>(len)) return false;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return false;
    if (!surrogatepass && cp >= 0xd800 && cp <= 0xdfff) return false;
    i += len;
  }
  return true;
}

}  // namespace ckptscan::pickle
