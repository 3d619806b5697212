#include "core/torch/repo_yaml.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/json_text.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/torch/code_names.h"

namespace ckptscan::torch {
namespace {

constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";
constexpr std::string_view kPythonTagPrefix = "tag:yaml.org,2002:python/";

// The types PyYAML's SafeLoader builds under tag:yaml.org,2002: (and YAML 1.1's value and merge
// keys): data, whatever loader reads them.
constexpr std::string_view kStandardTypes[] = {"str",  "int",   "float",  "bool",      "null",
                                               "map",  "seq",   "binary", "timestamp", "set",
                                               "omap", "pairs", "merge",  "value"};

// Of a %TAG prefix, at most this many bytes are kept for messages (what is judged of it is
// computed whole, when the directive is read).
constexpr size_t kMaxPrefixKept = 64;
// The longest standard tag ("tag:yaml.org,2002:timestamp").
constexpr size_t kMaxStandardBytes = 27;

// A possible simple key is at most this far (bytes) before its ':' (PyYAML: 1024 characters;
// a byte count is never smaller, so no key PyYAML reads is missed).
constexpr uint64_t kMaxSimpleKeyBytes = 1024 * 4;

// Escapes of a double-quoted scalar PyYAML replaces by one character (ESCAPE_REPLACEMENTS).
std::optional<std::string_view> SimpleEscape(char c) {
  switch (c) {
    case '0':
      return std::string_view("\0", 1);
    case 'a':
      return "\x07";
    case 'b':
      return "\x08";
    case 't':
    case '\t':
      return "\t";
    case 'n':
      return "\n";
    case 'v':
      return "\x0b";
    case 'f':
      return "\x0c";
    case 'r':
      return "\r";
    case 'e':
      return "\x1b";
    case ' ':
      return " ";
    case '"':
      return "\"";
    case '\\':
      return "\\";
    case '/':
      return "/";
    case 'N':
      return "\xc2\x85";
    case '_':
      return "\xc2\xa0";
    case 'L':
      return "\xe2\x80\xa8";
    case 'P':
      return "\xe2\x80\xa9";
    default:
      return std::nullopt;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsWordChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' ||
         c == '_';
}

// A character of a tag URI (PyYAML's scan_tag_uri; ',', '[' and ']' only where `flow_marks`).
bool IsUriChar(char c, bool flow_marks) {
  if (IsWordChar(c)) return true;
  switch (c) {
    case ';':
    case '/':
    case '?':
    case ':':
    case '@':
    case '&':
    case '=':
    case '+':
    case '$':
    case '.':
    case '!':
    case '~':
    case '*':
    case '\'':
    case '(':
    case ')':
    case '%':
      return true;
    case ',':
    case '[':
    case ']':
      return flow_marks;
    default:
      return false;
  }
}

bool IsStandard(std::string_view tag) {
  if (tag == "!") return true;  // the non-specific tag: resolved as if untagged
  if (tag.substr(0, kCoreTagPrefix.size()) != kCoreTagPrefix) return false;
  const std::string_view type = tag.substr(kCoreTagPrefix.size());
  return std::find(std::begin(kStandardTypes), std::end(kStandardTypes), type) !=
         std::end(kStandardTypes);
}

std::string_view Trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

class YamlScanner final {
 public:
  YamlScanner(std::string_view text, const YamlLimits& limits, YamlScan* out)
      : t_(text), limits_(limits), out_(out) {
    Bind("!", "!");
    Bind("!!", kCoreTagPrefix);
    keys_.resize(1);
  }

  void Run() {
    if (t_.substr(0, 3) == "\xef\xbb\xbf") pos_ = 3;  // a BOM takes no column
    while (!stopped_) {
      SkipToNextToken();
      if (End()) break;
      UnwindIndent(static_cast<int64_t>(col_));
      if (await_.has_value() && flow_ == 0 && line_ > await_->line && col_ <= await_->col) {
        await_.reset();  // a value at the key's column or left of it: the key's was empty
      }
      Token();
    }
  }

 private:
  struct Key {
    bool present = false;
    size_t pos = 0;
    uint64_t line = 0;
    uint64_t col = 0;
    bool has_scalar = false;  // the key's first scalar (after its anchor or tag) was read
    bool target = false;      // and it is `_target_`
  };
  struct ExplicitKey {
    bool active = false;  // after '?', until the next token that is no scalar
    uint64_t line = 0;
    uint64_t col = 0;
    bool has_scalar = false;
    bool target = false;
  };
  // An anchored scalar, for its aliases. An alias costs what its name costs: what a `_target_`
  // value needs of the scalar (trimmed, judged) is worked out once.
  struct Anchor {
    std::string value;        // decoded
    size_t target_begin = 0;  // `value` trimmed: value.substr(target_begin, target_size)
    size_t target_size = 0;
    std::optional<bool> runs_code;  // TargetRunsCode of it, once asked
  };
  struct Await {  // a `_target_` key's value is next
    uint64_t line = 0;
    uint64_t col = 0;
  };
  // What the prefixes bound to one handle (its default, every %TAG for it) can make of a
  // suffix, summed up when they are bound: judging a tag costs its length, however many
  // directives the file has.
  struct Handle {
    std::string first;            // the first prefix (cut at kMaxPrefixKept)
    bool several = false;         // bound to more than one prefix
    bool always_python = false;   // a prefix starting with kPythonTagPrefix
    std::string python_prefix;    // the first such prefix (cut)
    uint32_t python_lengths = 0;  // bit k: a prefix that is kPythonTagPrefix's first k bytes
  };

  // One token at pos_ (PyYAML's fetch_more_tokens, in its order).
  void Token() {
    const char c = t_[pos_];
    if (c == '%' && col_ == 0) return Directive();
    if ((c == '-' || c == '.') && col_ == 0 && DocMarkerAt(pos_)) return DocumentMarker();
    switch (c) {
      case '[':
      case '{':
        SaveKey();
        NotAScalar();
        if (flow_ + 1 > limits_.max_nesting) {
          return StopAtNesting("flow collections");
        }
        ++flow_;
        keys_.resize(flow_ + 1);
        keys_[flow_] = Key{};
        allow_key_ = true;
        return Forward();
      case ']':
      case '}':
        keys_[flow_].present = false;
        NotAScalar();
        if (flow_ > 0) --flow_;
        allow_key_ = false;
        return Forward();
      case ',':
        allow_key_ = true;
        keys_[flow_].present = false;
        NotAScalar();
        return Forward();
      case '-':
        if (BlankAt(pos_ + 1)) {
          if (flow_ == 0) AddIndent(static_cast<int64_t>(col_));
          allow_key_ = true;
          keys_[flow_].present = false;
          NotAScalar();
          return Forward();
        }
        break;
      case '?':
        if (flow_ > 0 || BlankAt(pos_ + 1)) {
          if (flow_ == 0) AddIndent(static_cast<int64_t>(col_));
          allow_key_ = flow_ == 0;
          keys_[flow_].present = false;
          NotAScalar();
          explicit_ = ExplicitKey{true, line_, col_, false, false};
          return Forward();
        }
        break;
      case ':':
        if (flow_ > 0 || BlankAt(pos_ + 1)) return Value();
        break;
      case '*':
        SaveKey();
        allow_key_ = false;
        return Alias();
      case '&':
        SaveKey();
        allow_key_ = false;
        Forward();
        pending_anchor_ = Word();
        return;
      case '!':
        SaveKey();
        allow_key_ = false;
        return Tag();
      case '|':
      case '>':
        if (flow_ == 0) {
          allow_key_ = true;
          keys_[flow_].present = false;
          return BlockScalar();
        }
        break;
      case '\'':
      case '"':
        SaveKey();
        allow_key_ = false;
        return QuotedScalar(c);
      default:
        break;
    }
    if (CheckPlain()) {
      SaveKey();
      allow_key_ = false;
      return Plain();
    }
    Forward();  // no token starts here: PyYAML stops; the scan reads on
  }

  // --- Positions. Columns count code points, as PyYAML's do.

  bool End() const { return pos_ >= t_.size(); }
  char At(size_t p) const { return p < t_.size() ? t_[p] : '\0'; }

  // The length of a line break at p ("\r\n", "\r", "\n", NEL, LS, PS), 0 if none.
  size_t BreakAt(size_t p) const {
    const char c = At(p);
    if (c == '\n') return 1;
    if (c == '\r') return At(p + 1) == '\n' ? 2 : 1;
    if (c == '\xc2' && At(p + 1) == '\x85') return 2;
    if (c == '\xe2' && At(p + 1) == '\x80' && (At(p + 2) == '\xa8' || At(p + 2) == '\xa9')) {
      return 3;
    }
    return 0;
  }
  bool BlankAt(size_t p) const {
    return p >= t_.size() || t_[p] == ' ' || t_[p] == '\t' || BreakAt(p) > 0;
  }
  bool DocMarkerAt(size_t p) const {
    const std::string_view m = t_.substr(p, 3);
    return (m == "---" || m == "...") && BlankAt(p + 3);
  }

  // One code point that is no line break.
  void Forward() {
    if (End()) return;
    const unsigned char c = static_cast<unsigned char>(t_[pos_]);
    size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    pos_ = std::min(t_.size(), pos_ + n);
    ++col_;
  }
  bool SkipBreak() {
    const size_t n = BreakAt(pos_);
    if (n == 0) return false;
    pos_ += n;
    ++line_;
    col_ = 0;
    return true;
  }
  // [0-9A-Za-z_-]* (anchor, alias, directive and handle names).
  std::string Word() {
    const size_t start = pos_;
    while (!End() && IsWordChar(t_[pos_])) Forward();
    return std::string(t_.substr(start, pos_ - start));
  }
  void Append(std::string* s, std::string_view x) const {
    if (s->size() < limits_.max_scalar_bytes) {
      s->append(x.substr(0, limits_.max_scalar_bytes - s->size()));
    }
  }

  // Past max_nesting the indentation is not known: the rest is not read.
  void StopAtNesting(std::string_view what) {
    Limit(absl::StrCat(base::AbslView(what), " nested deeper than ", limits_.max_nesting,
                       " (YamlLimits::max_nesting): the rest is not read"),
          "max_yaml_nesting", limits_.max_nesting);
    stopped_ = true;
  }
  void Limit(std::string message, std::string_view limit, uint64_t value) {
    if (!out_->status.ok()) return;
    out_->status = base::LimitError(message, limit, value);
    out_->error_offset = pos_;
  }

  // --- Between tokens: spaces, tabs (libyaml takes them where PyYAML stops), comments, breaks.
  void SkipToNextToken() {
    while (true) {
      SkipBlanks();
      if (At(pos_) == '#') {
        while (!End() && BreakAt(pos_) == 0) Forward();
      }
      if (!SkipBreak()) return;
      if (flow_ == 0) allow_key_ = true;
    }
  }

  // --- Block indentation (PyYAML's indents stack).
  void UnwindIndent(int64_t col) {
    if (flow_ > 0) return;
    while (indent_ > col) {
      indent_ = indents_.back();
      indents_.pop_back();
    }
  }
  void AddIndent(int64_t col) {
    if (indent_ >= col) return;
    if (indents_.size() + 1 > limits_.max_nesting) {
      return StopAtNesting("block collections");
    }
    indents_.push_back(indent_);
    indent_ = col;
  }

  // --- Simple keys: one possible key per flow level, valid on its line within a bound.
  void SaveKey() {
    if (!allow_key_) return;
    keys_[flow_] = Key{true, pos_, line_, col_, false, false};
  }

  // A token that is no scalar, alias, anchor or tag: an anchor before it anchors a collection,
  // a `_target_` value is no string, an explicit key's scalar is over.
  void NotAScalar() {
    pending_anchor_.reset();
    await_.reset();
    explicit_.active = false;
  }

  // A scalar (or an alias's scalar) read at `offset`: a key's text, a `_target_` value, an
  // anchor's value.
  // `anchor`: the alias's anchor it comes from.
  void Scalar(std::string_view value, size_t offset, uint64_t line, Anchor* anchor = nullptr) {
    Key& k = keys_[flow_];
    if (k.present && !k.has_scalar && k.line == line) {
      k.has_scalar = true;
      k.target = value == "_target_";
    }
    if (explicit_.active && !explicit_.has_scalar) {
      explicit_.has_scalar = true;
      explicit_.target = value == "_target_";
    }
    if (await_.has_value()) {
      if (anchor == nullptr) {
        Target(Trimmed(value), offset, line, nullptr);
      } else {
        Target(std::string_view(anchor->value).substr(anchor->target_begin, anchor->target_size),
               offset, line, &anchor->runs_code);
      }
      await_.reset();
    }
    if (pending_anchor_.has_value()) {
      if (anchors_.size() < limits_.max_anchors || anchors_.contains(*pending_anchor_)) {
        const std::string_view trimmed = Trimmed(value);
        anchors_[*pending_anchor_] =
            Anchor{std::string(value),
                   trimmed.empty() ? 0 : static_cast<size_t>(trimmed.data() - value.data()),
                   trimmed.size(), std::nullopt};
      } else {
        Limit(absl::StrCat("more than ", limits_.max_anchors,
                           " anchored scalars (YamlLimits::max_anchors): aliases of the others "
                           "are not resolved"),
              "max_yaml_anchors", limits_.max_anchors);
      }
      pending_anchor_.reset();
    }
  }

  // A `_target_` value, trimmed. `runs_code`: where its judgement is kept (an anchor's), or
  // null.
  void Target(std::string_view v, size_t offset, uint64_t line, std::optional<bool>* runs_code) {
    if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return;
    // Kept as scalars are, cut at max_scalar_bytes (an alias of no anchored scalar is judged by
    // its name, which no other bound cuts).
    v = v.substr(0, limits_.max_scalar_bytes);
    if (out_->targets.size() < limits_.max_targets) {
      out_->targets.push_back(YamlTarget{std::string(v), offset, line + 1});
      return;
    }
    ++out_->more_targets;
    std::optional<bool> judged;
    if (runs_code == nullptr) runs_code = &judged;
    if (!runs_code->has_value()) *runs_code = TargetRunsCode(v);
    if (**runs_code) ++out_->more_code_targets;
  }

  // ':' (PyYAML's fetch_value).
  void Value() {
    Key& k = keys_[flow_];
    bool target = false;
    Await where;
    if (k.present && k.line == line_ && pos_ - k.pos <= kMaxSimpleKeyBytes) {
      if (flow_ == 0) AddIndent(static_cast<int64_t>(k.col));
      allow_key_ = false;
      target = k.has_scalar && k.target;
      where = Await{k.line, k.col};
    } else {
      if (flow_ == 0) AddIndent(static_cast<int64_t>(col_));
      allow_key_ = flow_ == 0;
      target = explicit_.active && explicit_.has_scalar && explicit_.target;
      where = Await{explicit_.line, explicit_.col};
    }
    k.present = false;
    NotAScalar();
    Forward();
    if (target) await_ = where;
  }

  void Alias() {
    const size_t start = pos_;
    const uint64_t line = line_;
    Forward();
    const std::string name = Word();
    const auto it = anchors_.find(name);
    pending_anchor_.reset();
    if (it != anchors_.end()) {
      Scalar(it->second.value, start, line, &it->second);
    } else if (await_.has_value()) {
      // No anchored scalar of that name (a collection's, or none): judged by its name.
      Target(absl::StrCat("*", name), start, line, nullptr);
      await_.reset();
    }
  }

  // %TAG handle prefix (other directives are skipped). The line's rest is left to
  // SkipToNextToken, which reads a comment there; anything else PyYAML refuses.
  void Directive() {
    StreamLevel();
    Forward();
    if (Word() != "TAG") return SkipLine();
    SkipBlanks();
    if (At(pos_) != '!') return SkipLine();
    Forward();
    std::string handle = "!";
    if (At(pos_) != ' ' && At(pos_) != '\t') {
      handle += Word();
      if (At(pos_) != '!') return SkipLine();  // PyYAML and libyaml refuse the directive
      Forward();
      handle += "!";
    }
    SkipBlanks();
    std::string prefix = Uri(/*flow_marks=*/true);
    if (++directives_ > limits_.max_tag_directives) {
      Limit(absl::StrCat("more than ", limits_.max_tag_directives,
                         " %TAG directives (YamlLimits::max_tag_directives): the tags of the "
                         "others are not resolved"),
            "max_yaml_tag_directives", limits_.max_tag_directives);
      stopped_ = true;
      return;
    }
    Bind(handle, prefix);
    SkipLine();
  }
  void Bind(std::string_view handle, std::string_view prefix) {
    const auto [it, added] = handles_.try_emplace(std::string(handle));
    Handle& h = it->second;
    const std::string_view kept = prefix.substr(0, kMaxPrefixKept);
    if (added) {
      h.first = std::string(kept);
    } else if (prefix != h.first || prefix.size() > kMaxPrefixKept) {
      h.several = true;
    }
    if (prefix.substr(0, kPythonTagPrefix.size()) == kPythonTagPrefix) {
      if (!h.always_python) h.python_prefix = std::string(kept);
      h.always_python = true;
    } else if (prefix.size() < kPythonTagPrefix.size() &&
               kPythonTagPrefix.substr(0, prefix.size()) == prefix) {
      h.python_lengths |= uint32_t{1} << prefix.size();
    }
  }
  void SkipLine() {
    while (!End() && BreakAt(pos_) == 0) Forward();
  }
  void SkipBlanks() {
    while (At(pos_) == ' ' || At(pos_) == '\t') Forward();
  }

  // A directive or document marker: no block collection or simple key lives on past it.
  void StreamLevel() {
    UnwindIndent(-1);
    keys_[flow_].present = false;
    allow_key_ = false;
    NotAScalar();
  }

  void DocumentMarker() {
    StreamLevel();
    Forward();
    Forward();
    Forward();
  }

  // A tag URI, percent-escapes decoded (a bad escape is kept as written: PyYAML refuses it).
  std::string Uri(bool flow_marks) {
    std::string uri;
    while (!End() && IsUriChar(t_[pos_], flow_marks)) {
      const int hi = HexValue(At(pos_ + 1));
      const int lo = HexValue(At(pos_ + 2));
      if (t_[pos_] == '%' && hi >= 0 && lo >= 0) {
        Append(&uri, std::string(1, static_cast<char>(hi * 16 + lo)));
        Forward();
        Forward();
        Forward();
      } else {
        Append(&uri, t_.substr(pos_, 1));
        Forward();
      }
    }
    return uri;
  }

  // A tag at pos_ ('!'): verbatim "!<uri>", the non-specific "!", or handle + suffix.
  void Tag() {
    const size_t start = pos_;
    const uint64_t line = line_;
    if (At(pos_ + 1) == '<') {
      Forward();
      Forward();
      std::string uri = Uri(/*flow_marks=*/true);
      if (At(pos_) == '>') Forward();
      return Resolved(start, line, {}, std::move(uri), /*verbatim=*/true);
    }
    if (BlankAt(pos_ + 1)) return Forward();
    // PyYAML looks for a second '!' before a space or a break: a handle "!name!" follows.
    bool use_handle = false;
    for (size_t p = pos_ + 1; p < t_.size() && t_[p] != ' ' && BreakAt(p) == 0; ++p) {
      if (t_[p] == '!') {
        use_handle = true;
        break;
      }
    }
    Forward();
    std::string handle = "!";
    std::string suffix;
    if (use_handle) {
      std::string word = Word();
      if (At(pos_) == '!') {
        Forward();
        handle += word + "!";
      } else {
        suffix = std::move(word);  // libyaml's reading: "!word..." is a local tag
      }
    }
    suffix += Uri(/*flow_marks=*/flow_ == 0);
    if (suffix.empty() && handle == "!") return;  // PyYAML and libyaml refuse it
    Resolved(start, line, handle, std::move(suffix), /*verbatim=*/false);
  }

  // A '!' that begins a word inside a plain scalar: read as a tag, the position kept.
  void TagInPlain() {
    const size_t pos = pos_;
    const uint64_t col = col_;
    Tag();
    pos_ = pos;
    col_ = col;
  }

  void Resolved(size_t start, uint64_t line, std::string_view handle, std::string suffix,
                bool verbatim) {
    // The python/ meaning if there is one, else the first prefix's; standard only when that
    // is the one meaning.
    bool python = false;
    bool standard = false;
    std::string resolved;
    if (verbatim) {
      python = suffix.substr(0, kPythonTagPrefix.size()) == kPythonTagPrefix;
      standard = IsStandard(suffix);
      resolved = std::move(suffix);
    } else if (const auto it = handles_.find(base::AbslView(handle)); it != handles_.end()) {
      const Handle& h = it->second;
      std::string_view prefix = h.first;
      if (h.always_python) {
        python = true;
        prefix = h.python_prefix;
      }
      for (size_t k = 0; !python && k < kPythonTagPrefix.size(); ++k) {
        const std::string_view rest = kPythonTagPrefix.substr(k);
        if ((h.python_lengths >> k & 1) != 0 && suffix.substr(0, rest.size()) == rest) {
          python = true;
          prefix = kPythonTagPrefix.substr(0, k);
        }
      }
      standard = !python && !h.several && h.first.size() + suffix.size() <= kMaxStandardBytes &&
                 IsStandard(h.first + suffix);
      resolved = absl::StrCat(base::AbslView(prefix), suffix);
    }
    if (standard) return;
    std::string written;
    Append(&written, t_.substr(start, pos_ - start));
    const std::string key = resolved.empty() ? absl::StrCat("\n", written) : resolved;
    if (const auto it = tag_index_.find(key); it != tag_index_.end()) {
      ++out_->tags[it->second].count;
      return;
    }
    if (out_->tags.size() >= limits_.max_tags) {
      ++out_->more_tags;
      out_->more_python = out_->more_python || python;
      return;
    }
    tag_index_[key] = out_->tags.size();
    out_->tags.push_back(
        YamlTag{std::move(written), std::move(resolved), python, start, line + 1, 1});
  }

  // --- Scalars.

  bool CheckPlain() const {
    const char c = t_[pos_];
    if (BlankAt(pos_)) return false;
    if (std::string_view("-?:,[]{}#&*!|>'\"%@`").find(c) == std::string_view::npos) return true;
    return !BlankAt(pos_ + 1) && (c == '-' || (flow_ == 0 && (c == '?' || c == ':')));
  }

  bool EndsPlainChunk(size_t p) const {
    const char c = t_[p];
    if (BlankAt(p)) return true;
    if (c == ':') {
      const char n = At(p + 1);
      if (BlankAt(p + 1)) return true;
      if (flow_ > 0 && (n == ',' || n == '[' || n == ']' || n == '{' || n == '}')) return true;
    }
    return flow_ > 0 && std::string_view(",?[]{}").find(c) != std::string_view::npos;
  }

  // PyYAML's scan_plain: chunks separated by spaces, continued on lines indented past the
  // block's indentation (any line in a flow collection).
  void Plain() {
    const size_t start = pos_;
    const uint64_t line = line_;
    const int64_t min_col = indent_ + 1;
    std::string value;
    std::string spaces;
    bool first = true;
    while (!End() && t_[pos_] != '#') {
      size_t p = pos_;
      while (p < t_.size() && !EndsPlainChunk(p)) ++p;
      if (p == pos_) break;
      if (!first && t_[pos_] == '!') TagInPlain();
      first = false;
      allow_key_ = false;
      Append(&value, spaces);
      Append(&value, t_.substr(pos_, p - pos_));
      while (pos_ < p) Forward();
      const std::optional<std::string> next = PlainSpaces();
      if (!next.has_value() || next->empty() || At(pos_) == '#' ||
          (flow_ == 0 && static_cast<int64_t>(col_) < min_col)) {
        break;
      }
      spaces = *next;
    }
    Scalar(value, start, line);
  }

  // The white space after a plain chunk, folded: nullopt at a document marker.
  std::optional<std::string> PlainSpaces() {
    const size_t start = pos_;
    SkipBlanks();
    if (!SkipBreak()) return std::string(t_.substr(start, pos_ - start));
    allow_key_ = true;
    if (DocMarkerAt(pos_)) return std::nullopt;
    size_t breaks = 0;
    while (At(pos_) == ' ' || BreakAt(pos_) > 0) {
      if (At(pos_) == ' ') {
        Forward();
      } else {
        SkipBreak();
        ++breaks;
        if (DocMarkerAt(pos_)) return std::nullopt;
      }
    }
    return breaks == 0 ? std::string(" ") : std::string(breaks, '\n');
  }

  // PyYAML's scan_flow_scalar. A document marker at a line's start ends it (PyYAML refuses
  // the document there; what follows is read on).
  void QuotedScalar(char quote) {
    const size_t start = pos_;
    const uint64_t line = line_;
    Forward();
    std::string value;
    std::string spaces;
    while (!End()) {
      const char c = t_[pos_];
      if (c == quote) {
        if (quote == '\'' && At(pos_ + 1) == '\'') {
          Append(&value, spaces);
          spaces.clear();
          Append(&value, "'");
          Forward();
          Forward();
          continue;
        }
        Forward();
        break;
      }
      if (quote == '"' && c == '\\') {
        Append(&value, spaces);
        spaces.clear();
        Forward();
        if (!Escape(&value)) return;
        continue;
      }
      if (c == ' ' || c == '\t') {
        spaces.push_back(c);
        Forward();
        continue;
      }
      if (BreakAt(pos_) > 0) {
        spaces.clear();
        SkipBreak();
        const std::optional<size_t> breaks = QuotedBreaks();
        if (!breaks.has_value()) return;
        Append(&value, *breaks == 0 ? std::string(" ") : std::string(*breaks, '\n'));
        continue;
      }
      Append(&value, spaces);
      spaces.clear();
      const size_t from = pos_;
      Forward();
      Append(&value, t_.substr(from, pos_ - from));
    }
    Scalar(value, start, line);
  }

  // After a line break in a quoted scalar: the white space and further breaks (counted), or
  // nullopt at a document marker.
  std::optional<size_t> QuotedBreaks() {
    size_t breaks = 0;
    while (true) {
      if (DocMarkerAt(pos_)) return std::nullopt;
      SkipBlanks();
      if (!SkipBreak()) return breaks;
      ++breaks;
    }
  }

  // The escape after a '\' of a double-quoted scalar; false when a document marker ends it.
  bool Escape(std::string* value) {
    if (End()) return true;
    const char c = t_[pos_];
    if (const std::optional<std::string_view> r = SimpleEscape(c)) {
      Append(value, *r);
      Forward();
      return true;
    }
    const int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits > 0) {
      uint32_t cp = 0;
      for (int i = 1; i <= digits; ++i) {
        const int h = HexValue(At(pos_ + i));
        if (h < 0) return true;  // PyYAML refuses it; the next characters are read as text
        cp = cp * 16 + static_cast<uint32_t>(h);
      }
      for (int i = 0; i <= digits; ++i) Forward();
      if (cp <= 0x10ffff) {
        std::string utf8;
        base::AppendUtf8(&utf8, cp);
        Append(value, utf8);
      }
      return true;
    }
    if (SkipBreak()) {
      const std::optional<size_t> breaks = QuotedBreaks();
      if (!breaks.has_value()) return false;
      Append(value, std::string(*breaks, '\n'));
      return true;
    }
    return true;  // an unknown escape: PyYAML refuses it; read on
  }

  // PyYAML's scan_block_scalar: the header's indicators, then every line at the block's
  // indentation (the larger of the parent's plus one and the first lines' leading spaces).
  void BlockScalar() {
    const size_t start = pos_;
    const uint64_t line = line_;
    const bool folded = t_[pos_] == '>';
    Forward();
    int increment = 0;
    for (int i = 0; i < 2; ++i) {
      const char c = At(pos_);
      if (c == '+' || c == '-') {
        Forward();
      } else if (c >= '1' && c <= '9' && increment == 0) {
        increment = c - '0';
        Forward();
      }
    }
    SkipBlanks();
    if (At(pos_) == '#') SkipLine();
    if (!End() && BreakAt(pos_) == 0) return;  // both loaders refuse it; read the line on
    SkipBreak();
    const int64_t min_indent = std::max<int64_t>(indent_ + 1, 1);
    int64_t indent = 0;
    if (increment > 0) {
      indent = min_indent + increment - 1;
      BlockBreaks(indent);
    } else {
      int64_t max_indent = 0;
      while (At(pos_) == ' ' || BreakAt(pos_) > 0) {
        if (!SkipBreak()) {
          Forward();
          max_indent = std::max(max_indent, static_cast<int64_t>(col_));
        }
      }
      indent = std::max(min_indent, max_indent);
    }
    std::string value;
    while (static_cast<int64_t>(col_) == indent && !End()) {
      const size_t from = pos_;
      SkipLine();
      Append(&value, t_.substr(from, pos_ - from));
      if (!SkipBreak()) break;
      Append(&value, folded ? " " : "\n");
      BlockBreaks(indent);
    }
    Scalar(value, start, line);
  }
  void BlockBreaks(int64_t indent) {
    while (static_cast<int64_t>(col_) < indent && At(pos_) == ' ') Forward();
    while (SkipBreak()) {
      while (static_cast<int64_t>(col_) < indent && At(pos_) == ' ') Forward();
    }
  }

  std::string_view t_;
  const YamlLimits& limits_;
  YamlScan* out_;
  size_t pos_ = 0;
  uint64_t line_ = 0;  // 0-based
  uint64_t col_ = 0;
  bool stopped_ = false;
  uint64_t flow_ = 0;
  int64_t indent_ = -1;
  std::vector<int64_t> indents_;
  bool allow_key_ = true;
  std::vector<Key> keys_;  // by flow level
  ExplicitKey explicit_;
  std::optional<Await> await_;
  std::optional<std::string> pending_anchor_;
  absl::flat_hash_map<std::string, Anchor> anchors_;
  absl::flat_hash_map<std::string, Handle> handles_;  // the defaults and every %TAG's
  uint64_t directives_ = 0;                           // %TAG directives read
  absl::flat_hash_map<std::string, size_t> tag_index_;
};

}  // namespace

YamlScan ScanYaml(std::string_view text, const YamlLimits& limits) {
  YamlScan out;
  if (text.size() > limits.max_bytes) {
    out.status = base::LimitError(absl::StrCat("a YAML file of ", text.size(), " bytes is over ",
                                               limits.max_bytes, " (YamlLimits::max_bytes)"),
                                  "max_yaml_bytes", limits.max_bytes);
    return out;
  }
  YamlScanner(text, limits, &out).Run();
  return out;
}

bool IsYamlName(std::string_view file_name) {
  const auto ends_with = [&](std::string_view suffix) {
    if (file_name.size() < suffix.size()) return false;
    const std::string_view tail = file_name.substr(file_name.size() - suffix.size());
    for (size_t i = 0; i < suffix.size(); ++i) {
      const char c = tail[i];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != suffix[i]) {
        return false;
      }
    }
    return true;
  };
  return ends_with(".yaml") || ends_with(".yml");
}

}  // namespace ckptscan::torch
