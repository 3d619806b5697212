#include "base/json_python.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"

namespace ckptscan::base {
namespace {

constexpr uint32_t kReplacement = 0xFFFD;
constexpr uint32_t kEnd = 0xFFFFFFFF;  // past the last code point

bool IsSurrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }
bool IsHigh(uint32_t c) { return c >= 0xD800 && c <= 0xDBFF; }
bool IsLow(uint32_t c) { return c >= 0xDC00 && c <= 0xDFFF; }
bool IsSpace(uint32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void AppendUtf8(std::string* out, uint32_t c) {
  if (IsSurrogate(c)) c = kReplacement;
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The input's code points as Python's codec with `surrogatepass` decodes them. A position is a
// byte offset; Decode reads the code point there.
class Text {
 public:
  Text(std::string_view bytes, JsonEncoding e) : b_(bytes) {
    switch (e) {
      case JsonEncoding::kUtf8:
        break;
      case JsonEncoding::kUtf8Bom:
        start_ = 3;
        break;
      case JsonEncoding::kUtf16Bom:
        unit_ = 2;
        big_ = static_cast<uint8_t>(bytes[0]) == 0xFE;
        start_ = 2;
        break;
      case JsonEncoding::kUtf16Le:
        unit_ = 2;
        break;
      case JsonEncoding::kUtf16Be:
        unit_ = 2;
        big_ = true;
        break;
      case JsonEncoding::kUtf32Bom:
        unit_ = 4;
        big_ = static_cast<uint8_t>(bytes[0]) == 0x00;
        start_ = 4;
        break;
      case JsonEncoding::kUtf32Le:
        unit_ = 4;
        break;
      case JsonEncoding::kUtf32Be:
        unit_ = 4;
        big_ = true;
        break;
    }
  }

  size_t start() const { return start_; }
  size_t size() const { return b_.size(); }

  // The code point at `pos` (kEnd at the end) and where the next one starts; false when the
  // bytes there do not decode (Python raises UnicodeDecodeError for the whole input).
  bool Decode(size_t pos, uint32_t* c, size_t* next) const {
    if (pos >= b_.size()) {
      *c = kEnd;
      *next = pos;
      return true;
    }
    if (unit_ == 1) return Utf8(pos, c, next);
    if (b_.size() - pos < unit_) return false;  // truncated data
    const uint32_t u = Unit(pos);
    if (unit_ == 4) {
      if (u > 0x10FFFF) return false;
      *c = u;
      *next = pos + 4;
      return true;
    }
    // UTF-16: a high surrogate joins a low one that follows; any other surrogate passes alone.
    if (IsHigh(u) && b_.size() - pos >= 4 && IsLow(Unit(pos + 2))) {
      *c = 0x10000 + ((u - 0xD800) << 10) + (Unit(pos + 2) - 0xDC00);
      *next = pos + 4;
      return true;
    }
    *c = u;
    *next = pos + 2;
    return true;
  }

 private:
  uint32_t Byte(size_t i) const { return static_cast<uint8_t>(b_[i]); }

  uint32_t Unit(size_t pos) const {
    uint32_t v = 0;
    for (size_t k = 0; k < unit_; ++k) {
      const size_t i = big_ ? pos + k : pos + unit_ - 1 - k;
      v = (v << 8) | Byte(i);
    }
    return v;
  }

  // UTF-8 as Python decodes it with surrogatepass: strict (no overlongs, nothing past
  // U+10FFFF), except that the three-byte forms of U+D800..U+DFFF pass.
  bool Utf8(size_t pos, uint32_t* c, size_t* next) const {
    const uint32_t b0 = Byte(pos);
    if (b0 < 0x80) {
      *c = b0;
      *next = pos + 1;
      return true;
    }
    size_t len;
    uint32_t lo = 0x80, hi = 0xBF, v;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
      v = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      v = b0 & 0x0F;
      if (b0 == 0xE0) lo = 0xA0;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      v = b0 & 0x07;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (b_.size() - pos < len) return false;
    if (Byte(pos + 1) < lo || Byte(pos + 1) > hi) return false;
    for (size_t k = 1; k < len; ++k) {
      const uint32_t bk = Byte(pos + k);
      if (bk < 0x80 || bk > 0xBF) return false;
      v = (v << 6) | (bk & 0x3F);
    }
    *c = v;
    *next = pos + len;
    return true;
  }

  std::string_view b_;
  size_t start_ = 0;
  size_t unit_ = 1;
  bool big_ = false;
};

class Parser {
 public:
  Parser(const Text& text, uint32_t max_depth, JsonSink* sink)
      : t_(text), max_depth_(max_depth), sink_(sink), pos_(text.start()) {}

  uint64_t error_offset() const { return error_offset_; }

  absl::Status Run() {
    // Python decodes the whole input before it parses a character.
    for (size_t p = t_.start(); p < t_.size();) {
      uint32_t c;
      size_t next;
      if (!t_.Decode(p, &c, &next)) {
        return Error(p,
                     "not valid text in the encoding json.loads detects (it raises "
                     "UnicodeDecodeError)");
      }
      p = next;
    }
    SkipSpace();
    // One loop over the values: `stack_` holds the open containers, so nesting costs memory,
    // never C stack. Value() opens a container without reading into it; the loop reads its
    // members, one at a time, whatever container is innermost.
    absl::Status s = Value();
    while (s.ok() && !stack_.empty()) {
      Frame& f = stack_.back();
      if (f.opened) {
        f.opened = false;
        s = FirstMember();
      } else {
        s = AfterValue();
      }
    }
    if (!s.ok()) return s;
    SkipSpace();
    if (Peek() != kEnd) return Error(pos_, "Extra data");
    return absl::OkStatus();
  }

 private:
  uint32_t Peek() const {
    uint32_t c;
    size_t next;
    t_.Decode(pos_, &c, &next);  // validated in Run
    return c;
  }
  void Advance() {
    uint32_t c;
    size_t next;
    t_.Decode(pos_, &c, &next);
    pos_ = next;
  }
  void SkipSpace() {
    while (IsSpace(Peek())) Advance();
  }

  absl::Status Error(size_t at, std::string_view what) {
    error_offset_ = at;
    return absl::InvalidArgumentError(absl::StrCat(
        "not valid JSON as Python's json reads it: ", AbslView(what), " (byte ", at, ")"));
  }
  absl::Status Sink(absl::Status s, size_t at) {
    if (!s.ok()) error_offset_ = at;
    return s;
  }

  // Whether the ASCII word `w` follows at pos_; consumes it if so.
  bool Word(std::string_view w) {
    size_t p = pos_;
    for (char ch : w) {
      uint32_t c;
      size_t next;
      t_.Decode(p, &c, &next);
      if (c != static_cast<uint8_t>(ch)) return false;
      p = next;
    }
    pos_ = p;
    return true;
  }

  // A value starting at pos_ (white space skipped). Containers are opened, not read: the loop
  // in Run reads their members.
  absl::Status Value() {
    const size_t at = pos_;
    const uint32_t c = Peek();
    switch (c) {
      case '"': {
        std::string s;
        CKPT_RETURN_IF_ERROR(String(&s));
        return Sink(sink_->String(std::move(s), at), at);
      }
      case '{':
      case '[': {
        if (stack_.size() >= max_depth_) {
          error_offset_ = at;
          return LimitError(
              absl::StrCat("JSON values nested deeper than ", max_depth_, " (max_json_depth)"),
              "max_json_depth", max_depth_);
        }
        Advance();
        const bool object = c == '{';
        stack_.push_back(Frame{object, /*opened=*/true});
        return Sink(object ? sink_->StartObject(at) : sink_->StartArray(at), at);
      }
      case 'n':
        if (Word("null")) return Sink(sink_->Null(at), at);
        break;
      case 't':
        if (Word("true")) return Sink(sink_->Bool(true, at), at);
        break;
      case 'f':
        if (Word("false")) return Sink(sink_->Bool(false, at), at);
        break;
      case 'N':
        if (Word("NaN")) return Constant(JsonNumber::Kind::kNaN, at);
        break;
      case 'I':
        if (Word("Infinity")) return Constant(JsonNumber::Kind::kInfinity, at);
        break;
      case '-':
        if (Word("-Infinity")) return Constant(JsonNumber::Kind::kNegativeInfinity, at);
        return Number(at);
      default:
        if (c >= '0' && c <= '9') return Number(at);
        break;
    }
    return Error(at, "Expecting value");
  }

  // Just after '{' or '[': the first member, or the end.
  absl::Status FirstMember() {
    SkipSpace();
    const size_t at = pos_;
    if (Peek() == (stack_.back().object ? '}' : ']')) {
      Advance();
      return Close(at);
    }
    return Member();
  }

  // A member: an object's key, ':' and value, or an array's item.
  absl::Status Member() {
    if (stack_.back().object) {
      const size_t at = pos_;
      if (Peek() != '"') return Error(at, "Expecting property name enclosed in double quotes");
      std::string key;
      CKPT_RETURN_IF_ERROR(String(&key));
      CKPT_RETURN_IF_ERROR(Sink(sink_->Key(std::move(key), at), at));
      SkipSpace();
      if (Peek() != ':') return Error(pos_, "Expecting ':' delimiter");
      Advance();
      SkipSpace();
    }
    return Value();
  }

  // After a member of the innermost open container: ',' and the next, or its end.
  absl::Status AfterValue() {
    SkipSpace();
    const Frame& f = stack_.back();
    const size_t at = pos_;
    const uint32_t c = Peek();
    if (c == (f.object ? '}' : ']')) {
      Advance();
      return Close(at);
    }
    if (c != ',') return Error(at, "Expecting ',' delimiter");
    Advance();
    SkipSpace();
    return Member();
  }

  absl::Status Close(size_t at) {
    const bool object = stack_.back().object;
    stack_.pop_back();
    return Sink(object ? sink_->EndObject(at) : sink_->EndArray(at), at);
  }

  absl::Status Constant(JsonNumber::Kind kind, size_t at) {
    JsonNumber n;
    n.kind = kind;
    n.text = kind == JsonNumber::Kind::kNaN        ? "NaN"
             : kind == JsonNumber::Kind::kInfinity ? "Infinity"
                                                   : "-Infinity";
    return Sink(sink_->Number(n, at), at);
  }

  // _json.c's _match_number_unicode: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, where a
  // fraction or exponent without digits is left unread (the next token then fails).
  absl::Status Number(size_t at) {
    std::string text;
    const auto digit = [&] {
      const uint32_t c = Peek();
      return c >= '0' && c <= '9';
    };
    if (Peek() == '-') {
      text.push_back('-');
      Advance();
    }
    if (!digit()) return Error(at, "Expecting value");
    size_t int_digits = 0;
    if (Peek() == '0') {
      text.push_back('0');
      Advance();
      int_digits = 1;
    } else {
      while (digit()) {
        text.push_back(static_cast<char>(Peek()));
        Advance();
        ++int_digits;
      }
    }
    bool is_float = false;
    if (Peek() == '.') {
      const size_t dot = pos_;
      Advance();
      if (digit()) {
        text.push_back('.');
        while (digit()) {
          text.push_back(static_cast<char>(Peek()));
          Advance();
        }
        is_float = true;
      } else {
        pos_ = dot;
      }
    }
    const uint32_t e = Peek();
    if (e == 'e' || e == 'E') {
      const size_t e_at = pos_;
      std::string exp(1, static_cast<char>(e));
      Advance();
      if (Peek() == '-' || Peek() == '+') {
        exp.push_back(static_cast<char>(Peek()));
        Advance();
      }
      if (digit()) {
        while (digit()) {
          exp.push_back(static_cast<char>(Peek()));
          Advance();
        }
        text += exp;
        is_float = true;
      } else {
        pos_ = e_at;
      }
    }
    JsonNumber n;
    n.text = text;
    if (is_float) {
      n.kind = JsonNumber::Kind::kFloat;
    } else {
      if (int_digits > kMaxIntDigits) {
        return Error(at, absl::StrCat("an integer of ", int_digits,
                                      " digits (int() refuses more "
                                      "than ",
                                      kMaxIntDigits, ": ValueError)"));
      }
      n.kind = JsonNumber::Kind::kInt;
      if (text[0] != '-' && int_digits <= 20) {
        uint64_t v = 0;
        bool fits = true;
        for (char ch : text) {
          const uint64_t d = static_cast<uint64_t>(ch - '0');
          if (v > (UINT64_MAX - d) / 10) {
            fits = false;
            break;
          }
          v = v * 10 + d;
        }
        if (fits) n.unsigned_value = v;
      }
    }
    return Sink(sink_->Number(n, at), at);
  }

  static int Hex(uint32_t c) {
    if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
    return -1;
  }

  // Four hex digits at pos_, consumed; -1 (nothing consumed) when they are not.
  int32_t Hex4() {
    size_t p = pos_;
    int32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      uint32_t c;
      size_t next;
      t_.Decode(p, &c, &next);
      const int h = Hex(c);
      if (h < 0) return -1;
      v = v * 16 + h;
      p = next;
    }
    pos_ = p;
    return v;
  }

  // _json.c's scanstring_unicode, strict: a string at pos_ (its '"'), decoded into `out`.
  absl::Status String(std::string* out) {
    const size_t start = pos_;
    Advance();  // '"'
    while (true) {
      const size_t at = pos_;
      const uint32_t c = Peek();
      if (c == kEnd) return Error(start, "Unterminated string starting here");
      Advance();
      if (c == '"') return absl::OkStatus();
      if (c < 0x20) return Error(at, "Invalid control character");
      if (c != '\\') {
        AppendUtf8(out, c);
        continue;
      }
      const uint32_t e = Peek();
      if (e == kEnd) return Error(start, "Unterminated string starting here");
      Advance();
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(static_cast<char>(e));
          continue;
        case 'b':
          out->push_back('\b');
          continue;
        case 'f':
          out->push_back('\f');
          continue;
        case 'n':
          out->push_back('\n');
          continue;
        case 'r':
          out->push_back('\r');
          continue;
        case 't':
          out->push_back('\t');
          continue;
        case 'u':
          break;
        default:
          return Error(at, "Invalid \\escape");
      }
      int32_t u = Hex4();
      if (u < 0) return Error(at, "Invalid \\uXXXX escape");
      uint32_t cp = static_cast<uint32_t>(u);
      // A high surrogate joins a \u escape of a low one right after it; otherwise it stays
      // alone (and the escape after it is read on its own).
      if (IsHigh(cp)) {
        const size_t back = pos_;
        if (Word("\\u")) {
          const size_t second = pos_ - 2;
          const int32_t u2 = Hex4();
          if (u2 < 0) return Error(second, "Invalid \\uXXXX escape");
          if (IsLow(static_cast<uint32_t>(u2))) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<uint32_t>(u2) - 0xDC00);
          } else {
            pos_ = back;
          }
        }
      }
      AppendUtf8(out, cp);
    }
  }

  struct Frame {
    bool object;
    bool opened;  // its first member is still to be read
  };

  const Text& t_;
  const uint32_t max_depth_;
  JsonSink* sink_;
  size_t pos_;
  std::vector<Frame> stack_;
  uint64_t error_offset_ = 0;
};

}  // namespace

JsonEncoding DetectJsonEncoding(std::string_view b) {
  const auto at = [&](size_t i) { return static_cast<uint8_t>(b[i]); };
  const auto starts = [&](std::string_view p) { return b.substr(0, p.size()) == p; };
  using namespace std::string_view_literals;
  if (starts("\x00\x00\xFE\xFF"sv) || starts("\xFF\xFE\x00\x00"sv)) return JsonEncoding::kUtf32Bom;
  if (starts("\xFE\xFF"sv) || starts("\xFF\xFE"sv)) return JsonEncoding::kUtf16Bom;
  if (starts("\xEF\xBB\xBF"sv)) return JsonEncoding::kUtf8Bom;
  if (b.size() >= 4) {
    if (at(0) == 0) return at(1) != 0 ? JsonEncoding::kUtf16Be : JsonEncoding::kUtf32Be;
    if (at(1) == 0) {
      return at(2) != 0 || at(3) != 0 ? JsonEncoding::kUtf16Le : JsonEncoding::kUtf32Le;
    }
  } else if (b.size() == 2) {
    if (at(0) == 0) return JsonEncoding::kUtf16Be;
    if (at(1) == 0) return JsonEncoding::kUtf16Le;
  }
  return JsonEncoding::kUtf8;
}

const char* JsonEncodingName(JsonEncoding e) {
  switch (e) {
    case JsonEncoding::kUtf8:
      return "utf-8";
    case JsonEncoding::kUtf8Bom:
      return "utf-8-sig";
    case JsonEncoding::kUtf16Bom:
      return "utf-16";
    case JsonEncoding::kUtf16Le:
      return "utf-16-le";
    case JsonEncoding::kUtf16Be:
      return "utf-16-be";
    case JsonEncoding::kUtf32Bom:
      return "utf-32";
    case JsonEncoding::kUtf32Le:
      return "utf-32-le";
    case JsonEncoding::kUtf32Be:
      return "utf-32-be";
  }
  return "?";
}

absl::Status ParsePythonJson(std::string_view bytes, uint32_t max_depth, JsonSink* sink,
                             uint64_t* error_offset) {
  *error_offset = 0;
  const Text text(bytes, DetectJsonEncoding(bytes));
  Parser p(text, max_depth, sink);
  absl::Status s = p.Run();
  if (!s.ok()) *error_offset = p.error_offset();
  return s;
}

bool StartsWithJsonObject(std::string_view bytes) {
  const Text text(bytes, DetectJsonEncoding(bytes));
  size_t pos = text.start();
  while (true) {
    uint32_t c;
    size_t next;
    if (!text.Decode(pos, &c, &next)) return false;
    if (c == '{') return true;
    if (!IsSpace(c)) return false;
    pos = next;
  }
}

}  // namespace ckptscan::base
