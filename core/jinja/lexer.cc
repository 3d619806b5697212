#include "core/jinja/lexer.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/limit_status.h"
#include "base/strings.h"

namespace ckptscan::jinja {
namespace {

constexpr size_t kNpos = std::string_view::npos;

// One UTF-8 code point at `pos` (the text comes from validated UTF-8; a malformed byte reads
// as itself with length 1). Returns the code point and sets *len.
uint32_t DecodeAt(std::string_view s, size_t pos, size_t* len) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(pos);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (pos + n > s.size()) n = 1;
  for (size_t i = 1; i < n; ++i) {
    if ((b(pos + i) & 0xC0) != 0x80) n = 1;
  }
  *len = n;
  if (n == 1) return c;
  uint32_t cp = c & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (b(pos + i) & 0x3F);
  return cp;
}

// Python's str.isspace(), which `\s` and str.rstrip() use.
bool IsPySpace(uint32_t cp) {
  if (cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x80) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The length of the white space at `pos` (0 when there is none).
size_t SpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t len = 0;
  return IsPySpace(DecodeAt(s, pos, &len)) ? len : 0;
}

size_t SkipSpace(std::string_view s, size_t pos) {
  while (size_t n = SpaceAt(s, pos)) pos += n;
  return pos;
}

// str.rstrip(): the length of `s` without its trailing white space.
size_t RStripLength(std::string_view s) {
  size_t end = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = 0;
    const uint32_t cp = DecodeAt(s, pos, &len);
    pos += len;
    if (!IsPySpace(cp)) end = pos;
  }
  return end;
}

// re.fullmatch(r"\s+", s): non-empty and all white space.
bool AllSpace(std::string_view s) { return !s.empty() && RStripLength(s) == 0; }

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `(\d+_)*\d+` at pos (greedy; the regex cannot backtrack into a shorter match that helps).
size_t Digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !IsDigit(s[pos])) return kNpos;
  size_t q = pos;
  while (q < s.size() && IsDigit(s[q])) ++q;
  while (q + 1 < s.size() && s[q] == '_' && IsDigit(s[q + 1])) {
    ++q;
    while (q < s.size() && IsDigit(s[q])) ++q;
  }
  return q;
}

// jinja2.lexer.float_re at pos: the end of the match, or npos.
size_t FloatAt(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return kNpos;  // (?<!\.)
  const size_t q1 = Digits(s, pos);
  if (q1 == kNpos) return kNpos;
  size_t frac = kNpos;
  if (q1 < s.size() && s[q1] == '.') frac = Digits(s, q1 + 1);
  const auto exponent = [&](size_t q) -> size_t {
    if (q >= s.size() || (s[q] != 'e' && s[q] != 'E')) return kNpos;
    ++q;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    return Digits(s, q);
  };
  if (frac != kNpos) {
    if (const size_t e = exponent(frac); e != kNpos) return e;
  }
  if (const size_t e = exponent(q1); e != kNpos) return e;
  return frac;
}

// jinja2.lexer.integer_re at pos (an ASCII digit there): the end of the match.
size_t IntegerAt(std::string_view s, size_t pos) {
  const auto group = [&](size_t q, auto is_digit) -> size_t {
    size_t groups = 0;
    while (q < s.size()) {
      if (s[q] == '_' && q + 1 < s.size() && is_digit(s[q + 1])) {
        q += 2;
      } else if (is_digit(s[q])) {
        ++q;
      } else {
        break;
      }
      ++groups;
    }
    return groups > 0 ? q : kNpos;
  };
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char k = static_cast<char>(absl::ascii_tolower(static_cast<unsigned char>(s[pos + 1])));
    size_t end = kNpos;
    if (k == 'b') end = group(pos + 2, [](char c) { return c == '0' || c == '1'; });
    if (k == 'o') end = group(pos + 2, [](char c) { return c >= '0' && c <= '7'; });
    if (k == 'x') {
      end = group(pos + 2, [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); });
    }
    if (end != kNpos) return end;
  }
  if (s[pos] != '0') {
    const size_t end = group(pos + 1, IsDigit);
    return end == kNpos ? pos + 1 : end;
  }
  const size_t end = group(pos + 1, [](char c) { return c == '0'; });
  return end == kNpos ? pos + 1 : end;
}

// int(text.replace("_", ""), 0), when it fits in int64.
std::optional<int64_t> IntegerValue(std::string_view text) {
  std::string digits;
  for (char c : text) {
    if (c != '_') digits += c;
  }
  int base = 10;
  size_t start = 0;
  if (digits.size() > 1 && digits[0] == '0') {
    const char k = static_cast<char>(absl::ascii_tolower(static_cast<unsigned char>(digits[1])));
    base = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 10;
    if (base != 10) start = 2;
  }
  uint64_t v = 0;
  for (size_t i = start; i < digits.size(); ++i) {
    const int d = absl::ascii_isdigit(static_cast<unsigned char>(digits[i]))
                      ? digits[i] - '0'
                      : absl::ascii_tolower(static_cast<unsigned char>(digits[i])) - 'a' + 10;
    if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(d)) / base) {
      return std::nullopt;
    }
    v = v * base + static_cast<uint64_t>(d);
  }
  return static_cast<int64_t>(v);
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {  // lone surrogates too (Python strings hold them)
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The Unicode names of the ASCII characters that \N{...} can spell in an attribute name
// (letters, digits, "_"); any other name is not modelled.
std::optional<uint32_t> AsciiCharacterNamed(std::string name) {
  for (char& c : name) c = static_cast<char>(absl::ascii_toupper(static_cast<unsigned char>(c)));
  if (name == "LOW LINE") return '_';
  if (name == "SPACE") return ' ';
  if (name == "FULL STOP") return '.';
  constexpr std::array<std::string_view, 10> kDigits = {"ZERO", "ONE", "TWO",   "THREE", "FOUR",
                                                        "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"};
  for (size_t i = 0; i < kDigits.size(); ++i) {
    if (name == "DIGIT " + std::string(kDigits[i])) return '0' + static_cast<uint32_t>(i);
  }
  for (const auto& [prefix, base] :
       {std::pair<std::string_view, char>{"LATIN CAPITAL LETTER ", 'A'},
        std::pair<std::string_view, char>{"LATIN SMALL LETTER ", 'a'}}) {
    if (name.size() == prefix.size() + 1 && std::string_view(name).substr(0, prefix.size()) == prefix &&
        name.back() >= 'A' && name.back() <= 'Z') {
      return static_cast<uint32_t>(base + (name.back() - 'A'));
    }
  }
  return std::nullopt;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// value_str[1:-1].encode("ascii", "backslashreplace").decode("unicode-escape"), as UTF-8.
// `raw` is the literal between its quotes. On failure sets *problem (offset relative to raw).
bool DecodeString(std::string_view raw, std::string* out, Problem* problem) {
  std::string ascii;
  ascii.reserve(raw.size());
  for (size_t pos = 0; pos < raw.size();) {
    size_t len = 0;
    const uint32_t cp = DecodeAt(raw, pos, &len);
    if (cp < 0x80) {
      ascii += static_cast<char>(cp);
    } else if (cp <= 0xFF) {
      absl::StrAppend(&ascii, "\\x", absl::Hex(cp, absl::kZeroPad2));
    } else if (cp <= 0xFFFF) {
      absl::StrAppend(&ascii, "\\u", absl::Hex(cp, absl::kZeroPad4));
    } else {
      absl::StrAppend(&ascii, "\\U", absl::Hex(cp, absl::kZeroPad8));
    }
    pos += len;
  }
  out->clear();
  for (size_t i = 0; i < ascii.size();) {
    if (ascii[i] != '\\') {
      *out += ascii[i++];
      continue;
    }
    if (i + 1 >= ascii.size()) {
      problem->message = "\\ at end of string";
      return false;
    }
    const char e = ascii[i + 1];
    const auto hex = [&](size_t digits, std::string_view what) -> bool {
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int h = i + 2 + k < ascii.size() ? HexDigit(ascii[i + 2 + k]) : -1;
        if (h < 0) {
          problem->message = absl::StrCat("truncated ", base::AbslView(what), " escape");
          return false;
        }
        v = v * 16 + static_cast<uint32_t>(h);
      }
      if (v > 0x10FFFF) {
        problem->message = "illegal Unicode character";
        return false;
      }
      AppendUtf8(out, v);
      i += 2 + digits;
      return true;
    };
    switch (e) {
      case '\n':
        i += 2;
        break;
      case '\\':
      case '\'':
      case '"':
        *out += e;
        i += 2;
        break;
      case 'a':
        *out += '\a', i += 2;
        break;
      case 'b':
        *out += '\b', i += 2;
        break;
      case 'f':
        *out += '\f', i += 2;
        break;
      case 'n':
        *out += '\n', i += 2;
        break;
      case 'r':
        *out += '\r', i += 2;
        break;
      case 't':
        *out += '\t', i += 2;
        break;
      case 'v':
        *out += '\v', i += 2;
        break;
      case 'x':
        if (!hex(2, "\\xXX")) return false;
        break;
      case 'u':
        if (!hex(4, "\\uXXXX")) return false;
        break;
      case 'U':
        if (!hex(8, "\\UXXXXXXXX")) return false;
        break;
      case 'N': {
        const size_t close = i + 2 < ascii.size() && ascii[i + 2] == '{'
                                 ? ascii.find('}', i + 3)
                                 : std::string::npos;
        if (close == std::string::npos || close == i + 3) {
          problem->message = "malformed \\N character escape";
          return false;
        }
        const std::optional<uint32_t> cp =
            AsciiCharacterNamed(ascii.substr(i + 3, close - (i + 3)));
        if (!cp.has_value()) {
          problem->message = "a \\N{...} escape naming a character outside ASCII";
          problem->unsupported = true;
          return false;
        }
        AppendUtf8(out, *cp);
        i = close + 1;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = 0;
          size_t k = i + 1;
          while (k < ascii.size() && k < i + 4 && ascii[k] >= '0' && ascii[k] <= '7') {
            v = v * 8 + static_cast<uint32_t>(ascii[k] - '0');
            ++k;
          }
          AppendUtf8(out, v);
          i = k;
        } else {
          *out += '\\';  // an unknown escape keeps its backslash
          ++i;
        }
    }
  }
  return true;
}

struct Operator {
  std::string_view text;
  Tok type;
};
constexpr std::array<Operator, 26> kOperators = {{
    {"//", Tok::kFloorDiv}, {"**", Tok::kPow},      {"==", Tok::kEq},       {"!=", Tok::kNe},
    {">=", Tok::kGtEq},     {"<=", Tok::kLtEq},     {"+", Tok::kAdd},       {"-", Tok::kSub},
    {"/", Tok::kDiv},       {"*", Tok::kMul},       {"%", Tok::kMod},       {"~", Tok::kTilde},
    {"[", Tok::kLBracket},  {"]", Tok::kRBracket},  {"(", Tok::kLParen},    {")", Tok::kRParen},
    {"{", Tok::kLBrace},    {"}", Tok::kRBrace},    {">", Tok::kGt},        {"<", Tok::kLt},
    {"=", Tok::kAssign},    {".", Tok::kDot},       {":", Tok::kColon},     {"|", Tok::kPipe},
    {",", Tok::kComma},     {";", Tok::kSemicolon},
}};

// Python's repr() of a one-character string, as Jinja quotes an unexpected character.
std::string CharRepr(std::string_view s, size_t pos) {
  size_t len = 0;
  DecodeAt(s, pos, &len);
  const std::string_view c = s.substr(pos, len);
  if (c == "'") return "\"'\"";
  if (c == "\\") return "'\\\\'";
  return absl::StrCat("'", base::AbslView(c), "'");
}

class Lexer {
 public:
  Lexer(std::string_view text, const Limits& limits) : original_(text), limits_(limits) {}

  absl::StatusOr<Lexed> Run() {
    if (original_.size() > limits_.max_template_bytes) {
      return base::LimitError(absl::StrCat("a template of ", original_.size(),
                                           " bytes is over max_template_bytes"),
                              "max_template_bytes", limits_.max_template_bytes);
    }
    Normalize();
    absl::Status s = Root();
    if (!s.ok()) return s;
    if (!out_.problem.has_value()) {
      Token eof;
      eof.type = Tok::kEof;
      eof.offset = static_cast<uint32_t>(original_.size());
      eof.end = eof.offset;
      out_.tokens.push_back(std::move(eof));
    }
    return std::move(out_);
  }

 private:
  // "\r\n" and "\r" become "\n"; one trailing "\n" is dropped. collapsed_ holds the positions
  // (in src_) of each "\n" that stands for a "\r\n", to map offsets back.
  void Normalize() {
    src_.reserve(original_.size());
    for (size_t i = 0; i < original_.size(); ++i) {
      if (original_[i] == '\r') {
        if (i + 1 < original_.size() && original_[i + 1] == '\n') {
          collapsed_.push_back(static_cast<uint32_t>(src_.size()));
          ++i;
        }
        src_ += '\n';
      } else {
        src_ += original_[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  uint32_t Original(size_t pos) const {
    const size_t before =
        std::lower_bound(collapsed_.begin(), collapsed_.end(), static_cast<uint32_t>(pos)) -
        collapsed_.begin();
    return static_cast<uint32_t>(std::min(pos + before, original_.size()));
  }

  void Fail(size_t pos, std::string message, bool unsupported = false) {
    if (!out_.problem.has_value()) {
      out_.problem = Problem{Original(pos), std::move(message), unsupported};
    }
  }

  absl::Status Push(Tok type, size_t pos, size_t end, std::string text) {
    if (out_.tokens.size() >= limits_.max_tokens) {
      return base::LimitError(
          absl::StrCat("a template of more than ", limits_.max_tokens, " tokens"), "max_tokens",
          limits_.max_tokens);
    }
    Token t;
    t.type = type;
    t.offset = Original(pos);
    t.end = Original(end);
    t.text = std::move(text);
    out_.tokens.push_back(std::move(t));
    return absl::OkStatus();
  }

  // Data before a tag: `text` as read, `sign` the tag's whitespace control ('-', '+' or 0),
  // `lstrip_tag` whether lstrip_blocks applies to the tag (block, comment, raw; not variables).
  absl::Status Data(size_t start, std::string_view text, char sign, bool lstrip_tag) {
    std::string plain(text);
    if (sign == '-') plain.resize(RStripLength(plain));
    // The same data under trim_blocks: the "\n" the previous tag's end consumed is gone.
    std::string_view trim = plain;
    bool line_starting = line_starting_;
    if (trim_newline_ && !trim.empty() && trim.front() == '\n') {
      trim.remove_prefix(1);
      line_starting = true;
    }
    std::string trimmed(trim);
    if (sign != '-' && sign != '+' && lstrip_tag) {
      const size_t nl = trimmed.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && AllSpace(std::string_view(trimmed).substr(l_pos))) {
        trimmed.resize(l_pos);
      }
    }
    if (plain.empty()) return absl::OkStatus();
    absl::Status s = Push(Tok::kData, start, start + text.size(), std::move(plain));
    if (s.ok()) out_.tokens.back().trimmed = std::move(trimmed);
    return s;
  }

  // After a match ending at `end`: whether it ended a line, and whether trim_blocks would also
  // have consumed a "\n" right after it.
  void Ended(size_t end, bool trims_newline) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    trim_newline_ = trims_newline;
  }

  absl::Status Root() {
    size_t pos = 0;
    while (pos < src_.size() && !out_.problem.has_value()) {
      // (.*?) then the first tag start: raw, variable, comment or block begin.
      size_t p = pos;
      for (; p + 1 < src_.size(); ++p) {
        if (src_[p] == '{' && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
          break;
        }
      }
      if (p + 1 >= src_.size()) {  // no tag: the rest is data
        absl::Status s = Data(pos, std::string_view(src_).substr(pos), 0, false);
        Ended(src_.size(), false);
        return s;
      }
      const char kind = src_[p + 1];
      size_t after = p + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      const std::string_view text = std::string_view(src_).substr(pos, p - pos);
      if (kind == '%') {
        if (const size_t raw_end = RawBegin(p); raw_end != kNpos) {
          absl::Status s = Data(pos, text, sign, true);
          if (!s.ok()) return s;
          Ended(raw_end, false);
          absl::StatusOr<size_t> next = Raw(raw_end);
          if (!next.ok()) return next.status();
          pos = *next;
          continue;
        }
      }
      absl::Status s = Data(pos, text, sign, kind != '{');
      if (!s.ok()) return s;
      Ended(after, false);
      if (kind == '#') {
        pos = Comment(after);
      } else {
        absl::StatusOr<size_t> next = Tag(p, after, kind == '%');
        if (!next.ok()) return next.status();
        pos = *next;
      }
    }
    return absl::OkStatus();
  }

  // `{%(-|+|)\s*raw\s*(?:-%}\s*|%})` at p: the end of the match, or npos.
  size_t RawBegin(size_t p) const {
    size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    q = SkipSpace(src_, q);
    if (src_.compare(q, 3, "raw") != 0) return kNpos;
    q = SkipSpace(src_, q + 3);
    if (src_.compare(q, 3, "-%}") == 0) return SkipSpace(src_, q + 3);
    if (src_.compare(q, 2, "%}") == 0) return q + 2;
    return kNpos;
  }

  // The raw block's body up to `{%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?)`.
  absl::StatusOr<size_t> Raw(size_t pos) {
    for (size_t p = pos; p + 1 < src_.size(); ++p) {
      if (src_[p] != '{' || src_[p + 1] != '%') continue;
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = SkipSpace(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = SkipSpace(src_, q + 6);
      size_t end = kNpos;
      bool trims = false;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = SkipSpace(src_, q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = q + 2;
        trims = true;
      }
      if (end == kNpos) continue;
      absl::Status s = Data(pos, std::string_view(src_).substr(pos, p - pos), sign, true);
      if (!s.ok()) return s;
      Ended(end, trims);
      return end;
    }
    if (pos < src_.size()) Fail(pos, "Missing end of raw directive");
    return src_.size();
  }

  // A comment's body up to `+#}`, `-#}\s*` or `#}` (`\n?` under trim_blocks).
  size_t Comment(size_t pos) {
    for (size_t q = pos; q + 1 < src_.size(); ++q) {
      if ((src_[q] == '+' || src_[q] == '-') && src_.compare(q + 1, 2, "#}") == 0) {
        const size_t end = src_[q] == '-' ? SkipSpace(src_, q + 3) : q + 3;
        Ended(end, false);
        return end;
      }
      if (src_[q] == '#' && src_[q + 1] == '}') {
        Ended(q + 2, true);
        return q + 2;
      }
    }
    // Jinja's lexer stops without an error when the comment starts at the very end.
    if (pos < src_.size()) Fail(pos, "Missing end of comment tag");
    return src_.size();
  }

  // The tokens of a {% %} or {{ }} tag whose opening delimiter ends at `pos`.
  absl::StatusOr<size_t> Tag(size_t open, size_t pos, bool block) {
    {
      absl::Status s = Push(block ? Tok::kBlockBegin : Tok::kVariableBegin, open, pos,
                            std::string(src_.substr(open, pos - open)));
      if (!s.ok()) return s;
    }
    std::string balance;
    while (pos < src_.size()) {
      if (balance.empty()) {
        size_t end = kNpos;
        bool trims = false;
        if (block) {
          if (src_.compare(pos, 3, "+%}") == 0) {
            end = pos + 3;
          } else if (src_.compare(pos, 3, "-%}") == 0) {
            end = SkipSpace(src_, pos + 3);
          } else if (src_.compare(pos, 2, "%}") == 0) {
            end = pos + 2;
            trims = true;
          }
        } else if (src_.compare(pos, 3, "-}}") == 0) {
          end = SkipSpace(src_, pos + 3);
        } else if (src_.compare(pos, 2, "}}") == 0) {
          end = pos + 2;
        }
        if (end != kNpos) {
          absl::Status s = Push(block ? Tok::kBlockEnd : Tok::kVariableEnd, pos, end,
                                std::string(src_.substr(pos, end - pos)));
          if (!s.ok()) return s;
          Ended(end, trims);
          return end;
        }
      }
      if (const size_t n = SpaceAt(src_, pos)) {
        pos += n;
        Ended(pos, false);
        continue;
      }
      const char c = src_[pos];
      size_t end = kNpos;
      absl::Status s;
      if (IsDigit(c)) {
        if (const size_t f = FloatAt(src_, pos); f != kNpos) {
          s = Push(Tok::kFloat, pos, f, std::string(src_.substr(pos, f - pos)));
          end = f;
        } else {
          const size_t i = IntegerAt(src_, pos);
          s = Push(Tok::kInteger, pos, i, std::string(src_.substr(pos, i - pos)));
          if (s.ok()) out_.tokens.back().integer = IntegerValue(out_.tokens.back().text);
          end = i;
        }
      } else if (IsNameChar(c)) {
        size_t q = pos;
        while (q < src_.size() && IsNameChar(src_[q])) ++q;
        if (q < src_.size() && static_cast<unsigned char>(src_[q]) >= 0x80 &&
            SpaceAt(src_, q) == 0) {
          Fail(q, "a name with a non-ASCII character", true);
          return src_.size();
        }
        s = Push(Tok::kName, pos, q, std::string(src_.substr(pos, q - pos)));
        end = q;
      } else if (c == '\'' || c == '"') {
        size_t q = pos + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size()) {
          Fail(pos, absl::StrCat("unexpected char ", CharRepr(src_, pos), " at ", pos));
          return src_.size();
        }
        std::string value;
        Problem problem;
        if (!DecodeString(std::string_view(src_).substr(pos + 1, q - pos - 1), &value,
                          &problem)) {
          Fail(pos, problem.message, problem.unsupported);
          return src_.size();
        }
        s = Push(Tok::kString, pos, q + 1, std::move(value));
        end = q + 1;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        Fail(pos, "a non-ASCII character in an expression", true);
        return src_.size();
      } else {
        for (const Operator& op : kOperators) {
          if (src_.compare(pos, op.text.size(), op.text) != 0) continue;
          if (op.type == Tok::kLBrace || op.type == Tok::kLParen || op.type == Tok::kLBracket) {
            if (balance.size() >= limits_.max_nesting) {
              return base::LimitError(
                  absl::StrCat("brackets nested more than ", limits_.max_nesting, " deep"),
                  "max_nesting", limits_.max_nesting);
            }
            balance += op.type == Tok::kLBrace ? '}' : op.type == Tok::kLParen ? ')' : ']';
          } else if (op.type == Tok::kRBrace || op.type == Tok::kRParen ||
                     op.type == Tok::kRBracket) {
            if (balance.empty()) {
              Fail(pos, absl::StrCat("unexpected '", base::AbslView(op.text), "'"));
              return src_.size();
            }
            if (balance.back() != op.text[0]) {
              Fail(pos, absl::StrCat("unexpected '", base::AbslView(op.text), "', expected '",
                                     std::string(1, balance.back()), "'"));
              return src_.size();
            }
            balance.pop_back();
          }
          s = Push(op.type, pos, pos + op.text.size(), std::string(op.text));
          end = pos + op.text.size();
          break;
        }
        if (end == kNpos) {
          Fail(pos, absl::StrCat("unexpected char ", CharRepr(src_, pos), " at ", pos));
          return src_.size();
        }
      }
      if (!s.ok()) return s;
      Ended(end, false);
      pos = end;
    }
    return pos;  // the text ends inside the tag: the parser reports it
  }

  std::string_view original_;
  const Limits& limits_;
  std::string src_;
  std::vector<uint32_t> collapsed_;
  Lexed out_;
  bool line_starting_ = true;
  bool trim_newline_ = false;
};

}  // namespace

std::string_view TokName(Tok t) {
  switch (t) {
    case Tok::kData:
      return "template data / text";
    case Tok::kVariableBegin:
      return "begin of print statement";
    case Tok::kVariableEnd:
      return "end of print statement";
    case Tok::kBlockBegin:
      return "begin of statement block";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kName:
      return "name";
    case Tok::kString:
      return "string";
    case Tok::kInteger:
      return "integer";
    case Tok::kFloat:
      return "float";
    case Tok::kEof:
      return "end of template";
    default:
      break;
  }
  for (const Operator& op : kOperators) {
    if (op.type == t) return op.text;
  }
  return "?";
}

absl::StatusOr<Lexed> Lex(std::string_view text, const Limits& limits) {
  return Lexer(text, limits).Run();
}

}  // namespace ckptscan::jinja
