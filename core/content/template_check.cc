#include "core/content/template_check.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/escape.h"

namespace ckptscan::content {
namespace {

// How Jinja2's lexer reads a template (jinja2/lexer.py): data until the first "{{", "{%" or
// "{#"; inside "{{ }}" and "{% %}" a token stream (names, string and number literals,
// operators) that ends at "}}" / "%}" only while no bracket is open; "{# #}" a comment. String
// literals are '...' or "..." with backslash escapes, decoded as Python's "unicode-escape"
// codec decodes them. Line statements and custom delimiters are not enabled by the loaders
// that render chat templates (transformers, llama-cpp-python).

enum class Kind { kName, kString, kNumber, kOp };

struct Token {
  Kind kind = Kind::kOp;
  uint64_t offset = 0;
  std::string text;      // a name, an operator, or a string's decoded value
  bool flagged = false;  // a string already reported as a built name
};

constexpr size_t kQuoteBytes = 60;

std::string Quote(std::string_view s) {
  std::string out = "\"";
  if (s.size() > kQuoteBytes) {
    base::AppendEscaped(&out, s.substr(0, kQuoteBytes), {.escape_invisible = true});
    out += "...";
  } else {
    base::AppendEscaped(&out, s, {.escape_invisible = true});
  }
  out += '"';
  return out;
}

bool IsNameStart(unsigned char c) { return absl::ascii_isalpha(c) || c == '_' || c >= 0x80; }
bool IsNameChar(unsigned char c) { return IsNameStart(c) || absl::ascii_isdigit(c); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Globals whose attributes lead out of the sandbox (jinja2.defaults.DEFAULT_NAMESPACE, Flask's
// context) and that chat templates do not use at all: any reference is reported.
constexpr std::array<std::string_view, 8> kEscapeGlobals = {
    "lipsum", "cycler", "joiner", "self", "config", "request", "url_for", "get_flashed_messages"};
// Globals that benign templates call (namespace(...), range(...), dict(...)): reported only when
// one of their attributes or items is taken.
constexpr std::array<std::string_view, 3> kCalledGlobals = {"namespace", "range", "dict"};

// Filters whose result is a string (a character of it is how '_' is had without writing it).
constexpr std::array<std::string_view, 24> kStringFilters = {
    "string",      "pprint",    "format",  "lower",    "upper",    "title",
    "capitalize",  "trim",      "e",       "escape",   "safe",     "center",
    "forceescape", "urlencode", "indent",  "wordwrap", "truncate", "striptags",
    "replace",     "join",      "reverse", "tojson",   "xmlattr",  "filesizeformat"};
// Filters and str methods that assemble a string from pieces.
// Filters and str methods that make a string out of pieces: joined, formatted, replaced, padded
// with a fill character ('class'.center(9, '_')), translated.
constexpr std::array<std::string_view, 8> kBuilders = {"join",  "format", "replace",   "center",
                                                       "ljust", "rjust",  "translate", "maketrans"};
// Context variables whose text comes from the model's own files (tokenizer_config.json, GGUF
// metadata): a name chosen by whoever wrote the file.
constexpr std::array<std::string_view, 8> kTokenVars = {
    "bos_token", "eos_token", "pad_token",  "unk_token",
    "sep_token", "cls_token", "mask_token", "additional_special_tokens"};

bool IsOneOf(std::string_view s, const auto& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

bool IsOp(const Token* t, std::string_view op) {
  return t != nullptr && t->kind == Kind::kOp && t->text == op;
}
bool IsConcatOp(const Token* t) { return IsOp(t, "~") || IsOp(t, "+") || IsOp(t, "*"); }

// "%c" (with flags, width, precision) or a "{...:c}" format field: a character from a number,
// the way names are built without writing them.
bool HasCharConversion(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      size_t j = i + 1;
      while (j < s.size() &&
             std::string_view("-+ #0123456789.*").find(s[j]) != std::string_view::npos)
        ++j;
      if (j < s.size() && s[j] == 'c') return true;
      if (j < s.size() && s[j] == '%') i = j;  // "%%" is a literal percent sign
    }
  }
  return s.find(":c}") != std::string_view::npos;
}

class Checker {
 public:
  Checker(std::string_view text, const TemplateLimits& limits) : text_(text), limits_(limits) {}

  TemplateCheck Run() {
    size_t pos = 0;
    while (pos < text_.size()) {
      const size_t open = text_.find('{', pos);
      if (open == std::string_view::npos || open + 1 >= text_.size()) break;
      const char next = text_[open + 1];
      if (next == '#') {
        const size_t end = text_.find("#}", open + 2);
        if (end == std::string_view::npos) {
          Hit(open, "unbalanced", "a comment that is not closed (Jinja refuses the template)");
          break;
        }
        pos = end + 2;
      } else if (next == '{' || next == '%') {
        pos = Block(open, next == '%');
      } else {
        pos = open + 1;
      }
    }
    std::stable_sort(
        result_.hits.begin(), result_.hits.end(),
        [](const TemplateHit& a, const TemplateHit& b) { return a.offset < b.offset; });
    return std::move(result_);
  }

 private:
  void Hit(uint64_t offset, std::string_view construct, std::string message) {
    if (result_.hits.size() >= limits_.max_hits) {
      ++result_.more_hits;
      return;
    }
    result_.hits.push_back(TemplateHit{offset, std::string(construct), std::move(message)});
  }

  // The block starting at `open` ("{{" or "{%"); returns the offset after its end.
  size_t Block(size_t open, bool statement) {
    window_ = {};
    count_ = 0;
    lead_ = 0;
    statement_ = statement;
    frames_.assign(1, Frame{});  // the block's top level
    deep_ = 0;
    last_closed_computed_ = false;
    last_closed_string_ = false;
    set_target_.clear();
    set_target_done_ = false;
    int depth = 0;  // open brackets: "}}" / "%}" end the block only at depth 0
    size_t pos = open + 2;
    const char closer = statement ? '%' : '}';
    while (pos < text_.size()) {
      const unsigned char c = static_cast<unsigned char>(text_[pos]);
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++pos;
        continue;
      }
      if (depth == 0 && c == static_cast<unsigned char>(closer) && pos + 1 < text_.size() &&
          text_[pos + 1] == '}') {
        EndBlock();
        return pos + 2;
      }
      if (c == '\'' || c == '"') {
        const size_t end = String(pos);
        if (end == std::string_view::npos) {
          Hit(pos, "unbalanced", "a string that is not closed (Jinja refuses the template)");
          return text_.size();
        }
        pos = end;
      } else if (IsNameStart(c)) {
        size_t end = pos + 1;
        while (end < text_.size() && IsNameChar(static_cast<unsigned char>(text_[end]))) ++end;
        Push(Token{Kind::kName, pos, std::string(text_.substr(pos, end - pos))});
        pos = end;
      } else if (absl::ascii_isdigit(c)) {
        size_t end = pos + 1;
        while (end < text_.size() && (absl::ascii_isalnum(static_cast<unsigned char>(text_[end])) ||
                                      text_[end] == '_' || text_[end] == '.')) {
          ++end;
        }
        Push(Token{Kind::kNumber, pos, std::string(text_.substr(pos, end - pos))});
        pos = end;
      } else {
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        Push(Token{Kind::kOp, pos, std::string(1, static_cast<char>(c))});
        ++pos;
      }
    }
    Hit(open, "unbalanced",
        absl::StrCat("a ", statement ? "{% %}" : "{{ }}",
                     " block that is not closed (Jinja refuses the template)"));
    return text_.size();
  }

  // The string literal whose quote is at `pos`: decodes it, reports escapes that spell names,
  // pushes it; returns the offset after the closing quote (npos when it is not closed).
  size_t String(size_t pos) {
    const char quote = text_[pos];
    std::string value;
    size_t i = pos + 1;
    while (i < text_.size() && text_[i] != quote) {
      if (text_[i] != '\\') {
        value += text_[i++];
        continue;
      }
      if (i + 1 >= text_.size()) return std::string_view::npos;
      const size_t esc = i;
      const char e = text_[i + 1];
      long code = -1;  // the decoded code point; -1 for a malformed escape (kept as written)
      size_t len = 2;
      auto hex = [&](size_t digits) {
        if (i + 2 + digits > text_.size()) return;
        long v = 0;
        for (size_t k = 0; k < digits; ++k) {
          const int h = HexValue(text_[i + 2 + k]);
          if (h < 0) return;
          v = v * 16 + h;
        }
        code = v;
        len = 2 + digits;
      };
      bool spelled = false;  // a numeric or named escape (\x \u \U \N{} \ooo)
      switch (e) {
        case 'x':
          hex(2), spelled = code >= 0;
          break;
        case 'u':
          hex(4), spelled = code >= 0;
          break;
        case 'U':
          hex(8), spelled = code >= 0;
          break;
        case 'N': {
          // Unicode names are short: look for the brace a bounded distance ahead (an unbounded
          // search per escape is quadratic in the template's size).
          const size_t close =
              text_.substr(0, std::min(text_.size(), i + 3 + kMaxEscapeName)).find('}', i + 2);
          if (i + 2 < text_.size() && text_[i + 2] == '{' && close != std::string_view::npos) {
            const std::string name =
                absl::AsciiStrToUpper(std::string(text_.substr(i + 3, close - (i + 3))));
            code = name == "LOW LINE" ? '_' : 0xFFFD;
            len = close + 1 - i;
            Hit(esc, "escape",
                absl::StrCat("a named escape ", Quote(text_.substr(i, len)),
                             " in a string literal"));
          }
          break;
        }
        case 'n':
          code = '\n';
          break;
        case 't':
          code = '\t';
          break;
        case 'r':
          code = '\r';
          break;
        case 'a':
          code = '\a';
          break;
        case 'b':
          code = '\b';
          break;
        case 'f':
          code = '\f';
          break;
        case 'v':
          code = '\v';
          break;
        case '\\':
        case '\'':
        case '"':
          code = static_cast<unsigned char>(e);
          break;
        case '\n':
          code = -2;
          break;  // a line continuation: nothing
        default:
          if (e >= '0' && e <= '7') {
            long v = 0;
            size_t k = 0;
            while (k < 3 && i + 1 + k < text_.size() && text_[i + 1 + k] >= '0' &&
                   text_[i + 1 + k] <= '7') {
              v = v * 8 + (text_[i + 1 + k] - '0');
              ++k;
            }
            code = v;
            len = 1 + k;
            spelled = true;
          } else {
            value += '\\';  // an unknown escape keeps its backslash
            code = static_cast<unsigned char>(e);
          }
      }
      if (spelled && code < 0x80 &&
          (absl::ascii_isalnum(static_cast<unsigned char>(code)) || code == '_')) {
        Hit(esc, "escape",
            absl::StrCat("escape ", Quote(text_.substr(i, len)), " spells '",
                         std::string(1, static_cast<char>(code)), "' in a string literal"));
      }
      if (code == -2) {
        i += len;
        continue;
      }
      value += code >= 0 && code < 0x80 ? static_cast<char>(code) : '?';
      i += len;
    }
    if (i >= text_.size()) return std::string_view::npos;
    Push(Token{Kind::kString, pos, std::move(value)});
    return i + 1;
  }

  // The token window: each pattern is checked when its last token arrives.
  void Push(Token t) {
    std::rotate(window_.begin(), window_.begin() + 1, window_.end());
    window_.back() = std::move(t);
    ++count_;
    Token& cur = window_[3];
    Token* prev = count_ >= 2 ? &window_[2] : nullptr;
    Token* prev2 = count_ >= 3 ? &window_[1] : nullptr;
    Token* prev3 = count_ >= 4 ? &window_[0] : nullptr;
    const bool after_dot = IsOp(prev, ".");

    if (cur.kind == Kind::kName) {
      if (cur.text.find("__") != std::string::npos) {
        Hit(cur.offset, "dunder", absl::StrCat("name ", Quote(cur.text)));
      }
      if (cur.text == "attr" && IsOp(prev, "|")) {
        Hit(cur.offset, "attr_filter", "the attr filter (attribute access by a computed name)");
      }
      if (!after_dot && IsOneOf(cur.text, kEscapeGlobals)) {
        Hit(cur.offset, "global_attribute", absl::StrCat("the global ", Quote(cur.text)));
      }
      if (statement_ && !after_dot &&
          (cur.text == "import" || cur.text == "include" || cur.text == "extends")) {
        Hit(cur.offset, "import",
            absl::StrCat("statement ", Quote(cur.text), " (loads another template)"));
      }
      if (after_dot && cur.text == "format") {
        Hit(cur.offset, "format_build", "the str.format method");
      }
      if (cur.text == "list" && IsOp(prev, "|") && prev2 != nullptr && prev2->kind == Kind::kName &&
          IsOneOf(prev2->text, kStringFilters) && IsOp(prev3, "|")) {
        Hit(prev2->offset, "string_index",
            absl::StrCat("a string split into characters (|", prev2->text, "|list)"));
      }
    } else if (cur.kind == Kind::kString) {
      if (cur.text.find("__") != std::string::npos) {
        Hit(cur.offset, "dunder", absl::StrCat("string ", Quote(cur.text)));
      }
      if (HasCharConversion(cur.text)) {
        Hit(cur.offset, "format_build",
            absl::StrCat("a character conversion in ", Quote(cur.text)));
      }
      if (IsConcatOp(prev)) BuiltName(cur);
    } else if (cur.kind == Kind::kOp) {
      if ((cur.text == "." || cur.text == "[") && prev != nullptr && prev->kind == Kind::kName &&
          IsOneOf(prev->text, kCalledGlobals) && !IsOp(prev2, ".")) {
        Hit(prev->offset, "global_attribute",
            absl::StrCat("an attribute of the global ", Quote(prev->text)));
      }
      if (IsConcatOp(&cur) && prev != nullptr && prev->kind == Kind::kString) BuiltName(*prev);
    }
    Track(cur, prev, prev2);
  }

  static bool IsValueEnd(const Token* t) {
    return t != nullptr &&
           (t->kind != Kind::kOp || t->text == ")" || t->text == "]" || t->text == "}");
  }

  // Names used as keys: a subscript whose key is built (concatenated, joined, formatted,
  // replaced, directly or through a variable set that way, a macro's or a set block's text) or
  // a special token's text; a computed key on a literal ('...'[k], ()[k]) or on a computed
  // subscript (x[a][b]); a character of a string literal or of a filter's string result.
  // Jinja (outside its sandbox) falls back from x[k] to getattr(x, k): these are attribute
  // chains by another spelling.
  void Track(const Token& cur, const Token* prev, const Token* prev2) {
    const bool open =
        cur.kind == Kind::kOp && (cur.text == "(" || cur.text == "[" || cur.text == "{");
    const bool close =
        cur.kind == Kind::kOp && (cur.text == ")" || cur.text == "]" || cur.text == "}");
    if (open) {
      if (deep_ > 0 || frames_.size() >= kMaxFrames) {
        ++deep_;
        return;
      }
      Frame& parent = frames_.back();
      parent.literal_only = false;
      ++parent.tokens;
      Frame f;
      f.open = cur.text[0];
      f.offset = cur.offset;
      f.subscript = cur.text == "[" && IsValueEnd(prev);
      if (f.subscript) {
        f.string_subject = prev->kind == Kind::kString || (IsOp(prev, ")") && IsOp(prev2, "("));
        f.on_computed = IsOp(prev, "]") && last_closed_computed_;
        f.after_string_filter =
            (IsOp(prev, ")") && last_closed_string_) ||
            (prev->kind == Kind::kName && IsOneOf(prev->text, kStringFilters) && IsOp(prev2, "|"));
      }
      // The arguments of a string filter: what closes them is the filter's string result.
      f.string_filter = cur.text == "(" && prev != nullptr && prev->kind == Kind::kName &&
                        IsOneOf(prev->text, kStringFilters) && IsOp(prev2, "|");
      frames_.push_back(f);
      return;
    }
    if (close) {
      if (deep_ > 0) {
        --deep_;
        return;
      }
      if (frames_.size() <= 1) return;  // a bracket closed that was never opened
      const Frame f = frames_.back();
      frames_.pop_back();
      Frame& parent = frames_.back();
      parent.concat |= f.concat;
      parent.string_literal |= f.string_literal;
      parent.arithmetic |= f.arithmetic;
      parent.built_var |= f.built_var;
      parent.token_var |= f.token_var;
      last_closed_string_ = f.string_filter;
      last_closed_computed_ = false;
      if (!f.subscript) return;
      const bool computed = !f.literal_only;
      last_closed_computed_ = computed;
      if (computed && (f.Built() || f.token_var || f.on_computed || f.string_subject)) {
        Hit(f.offset, "computed_key",
            absl::StrCat("a subscript by a ",
                         f.token_var     ? "special token's text"
                         : f.Built()     ? "name built from pieces"
                         : f.on_computed ? "computed key of a computed subscript"
                                         : "computed key of a literal",
                         " (an attribute lookup by another spelling)"));
      } else if (f.string_subject || f.after_string_filter) {
        Hit(f.offset, "string_index", "a character or slice taken from a string");
      }
      return;
    }
    if (deep_ > 0) return;
    Frame& f = frames_.back();
    ++f.tokens;
    if (!(cur.kind == Kind::kString || cur.kind == Kind::kNumber || IsOp(&cur, ":") ||
          IsOp(&cur, "-"))) {
      f.literal_only = false;
    }
    if (cur.kind == Kind::kString) {
      // Jinja joins adjacent string literals ('_' '_' 'class' '_' '_' is "__class__").
      if (prev != nullptr && prev->kind == Kind::kString) {
        f.concat = true;
        f.literal_only = false;
      }
      f.string_literal = true;
    }
    if (IsOp(&cur, "~")) f.concat = true;
    if (IsOp(&cur, "+") || IsOp(&cur, "*") || IsOp(&cur, "%")) f.arithmetic = true;
    if (cur.kind == Kind::kName) {
      const bool filter = IsOp(prev, "|");
      const bool attribute = IsOp(prev, ".");
      if ((filter || attribute) && IsOneOf(cur.text, kBuilders)) f.concat = true;
      if (filter && IsOneOf(cur.text, kStringFilters)) f.string_filter = true;
      std::string name = cur.text;
      if (attribute && prev2 != nullptr && prev2->kind == Kind::kName) {
        name = absl::StrCat(prev2->text, ".", cur.text);
      }
      // caller() is the text of a {% call %} block: template data.
      const bool built = ((!attribute || name != cur.text) && built_names_.count(name) > 0) ||
                         (!attribute && cur.text == "caller");
      const bool token = !attribute && IsOneOf(cur.text, kTokenVars);
      f.built_var |= built;
      f.token_var |= token;
      if ((built || token) && IsOp(prev, "=") && prev2 != nullptr && prev2->kind == Kind::kName &&
          prev2->text == "attribute") {
        Hit(cur.offset, "computed_key",
            absl::StrCat("attribute=", Quote(cur.text), ": an attribute named by a built string"));
      }
    }
    // {% set NAME[.ATTR] = ... %}, {% set NAME %}...{% endset %}, {% macro NAME(...) %}
    if (statement_ && frames_.size() == 1) {
      // Whitespace control ({%- and {%+) puts a sign before the keyword.
      if (count_ == 1 && (IsOp(&cur, "-") || IsOp(&cur, "+"))) lead_ = 1;
      if (count_ == 1 + lead_ && cur.kind == Kind::kName) first_name_ = cur.text;
      if ((first_name_ == "set" || first_name_ == "macro") && count_ >= 2 + lead_ &&
          !set_target_done_) {
        if (cur.kind == Kind::kName && (set_target_.empty() || IsOp(prev, "."))) {
          absl::StrAppend(&set_target_, set_target_.empty() ? "" : ".", cur.text);
        } else if (IsOp(&cur, "=")) {
          set_target_done_ = true;
          assigned_ = true;
        } else if (!IsOp(&cur, ".")) {
          set_target_done_ = true;
        }
      }
    }
  }

  // At the end of a statement: a variable set from a built string, a special token's text, a
  // set block's or a macro's text (template data, where "__class__" needs no quotes) is built.
  void EndBlock() {
    if (statement_ && !set_target_.empty()) {
      const Frame& top = frames_.front();
      if (first_name_ == "macro" || !assigned_ || top.Built() || top.token_var) {
        built_names_.insert(set_target_);
      }
    }
    first_name_.clear();
    assigned_ = false;
  }

  // A string operand of ~, + or * that begins or ends with '_': a name assembled from pieces.
  void BuiltName(Token& s) {
    if (s.flagged || s.text.empty() || (s.text.front() != '_' && s.text.back() != '_')) return;
    s.flagged = true;
    Hit(s.offset, "built_name",
        absl::StrCat("string ", Quote(s.text), " joined to another operand"));
  }

  std::string_view text_;
  const TemplateLimits& limits_;
  TemplateCheck result_;
  std::array<Token, 4> window_;
  uint64_t count_ = 0;
  uint64_t lead_ = 0;  // 1 when the statement starts with a whitespace-control sign
  bool statement_ = false;

  // What the tokens inside one bracket (or the block's top level, frames_[0]) amount to.
  struct Frame {
    char open = 0;
    uint64_t offset = 0;
    bool subscript = false;            // x[...], not a list literal
    bool string_subject = false;       // '...'[...]: a character or slice of a literal
    bool on_computed = false;          // x[a][b]: a subscript of a computed subscript
    bool after_string_filter = false;  // (x|string)[...], (x|format(...))[...]
    bool literal_only = true;          // only literals (strings, numbers, ':' and '-') so far
    uint64_t tokens = 0;
    bool concat = false;  // ~, |join, |format, |replace, .join(), .format(), .replace()
    bool string_literal = false;
    bool arithmetic = false;     // + * %: concatenation when a string is an operand
    bool built_var = false;      // a variable set from a built string
    bool token_var = false;      // a special token (bos_token, ...): text from the model's files
    bool string_filter = false;  // a string-producing filter at this level
    bool Built() const { return concat || built_var || (string_literal && arithmetic); }
  };
  static constexpr size_t kMaxFrames = 256;      // deeper brackets are counted, not tracked
  static constexpr size_t kMaxEscapeName = 128;  // longest \N{...} looked for
  std::vector<Frame> frames_;
  uint64_t deep_ = 0;                  // brackets open past kMaxFrames
  bool last_closed_computed_ = false;  // the subscript just closed had a computed key
  bool last_closed_string_ = false;    // the bracket just closed ended in a string filter
  std::string first_name_;             // a statement's keyword
  std::string set_target_;             // {% set NAME[.ATTR] = ... %}, {% macro NAME %}
  bool set_target_done_ = false;
  bool assigned_ = false;              // the set statement has "=" (not a set block)
  std::set<std::string> built_names_;  // variables set from built strings, in any block
};

}  // namespace

TemplateCheck CheckChatTemplate(std::string_view text, const TemplateLimits& limits) {
  return Checker(text, limits).Run();
}

}  // namespace ckptscan::content
