// What attributes, items, calls, filters, tests, methods and operators mean over abstract
// values (evaluator.h), and which of them are findings.
#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/strings.h"
#include "core/jinja/evaluator.h"
#include "core/jinja/parser.h"

namespace ckptscan::jinja {
namespace {

template <size_t N>
bool In(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

// Methods of data that cannot reach code: their receiver's own text, items and numbers.
constexpr std::array<std::string_view, 44> kStrMethods = {
    "capitalize", "casefold",  "center",      "count",        "endswith",   "expandtabs",
    "find",       "index",     "isalnum",     "isalpha",      "isascii",    "isdecimal",
    "isdigit",    "isidentifier", "islower",  "isnumeric",    "isprintable", "isspace",
    "istitle",    "isupper",   "join",        "ljust",        "lower",      "lstrip",
    "partition",  "removeprefix", "removesuffix", "replace",  "rfind",      "rindex",
    "rjust",      "rpartition", "rsplit",     "rstrip",       "split",      "splitlines",
    "startswith", "strip",     "swapcase",    "title",        "upper",      "zfill",
    "striptags",  "unescape"};  // the last two: markupsafe.Markup's
constexpr std::array<std::string_view, 11> kListMethods = {
    "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove", "reverse",
    "sort"};
constexpr std::array<std::string_view, 10> kDictMethods = {
    "clear", "copy", "get", "items", "keys", "pop", "popitem", "setdefault", "update", "values"};
constexpr std::array<std::string_view, 9> kNumMethods = {
    "bit_length", "conjugate", "real",    "imag",     "numerator", "denominator",
    "is_integer", "as_integer_ratio", "bit_count"};
constexpr std::array<std::string_view, 2> kTupleMethods = {"count", "index"};
// Methods of data outside the data model (they give bytes, classes' helpers, translation
// tables): not code, but not data a template needs either.
constexpr std::array<std::string_view, 8> kOtherDataMethods = {
    "encode", "maketrans", "translate", "fromkeys", "to_bytes", "from_bytes", "hex", "fromhex"};
constexpr std::array<std::string_view, 13> kLoopAttrs = {
    "index", "index0", "revindex", "revindex0", "first", "last", "length",
    "depth", "depth0", "previtem", "nextitem", "cycle", "changed"};

bool IsFormat(std::string_view name) { return name == "format" || name == "format_map"; }

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// UTF-8 code points (the text is UTF-8; a stray byte counts as one).
std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0) n = 4;
    else if (c >= 0xE0) n = 3;
    else if (c >= 0xC0) n = 2;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool PySpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F); }

std::string StripChars(std::string_view s, std::string_view chars, bool left, bool right,
                       bool whitespace) {
  const auto strip = [&](char c) {
    return whitespace ? PySpace(c) : chars.find(c) != std::string_view::npos;
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip(s[e - 1])) --e;
  }
  return std::string(s.substr(b, e - b));
}

std::string Title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalpha(u)) {
      c = static_cast<char>(prev_cased ? absl::ascii_tolower(u) : absl::ascii_toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to,
                    int64_t count, size_t max_bytes, bool* ok) {
  std::string out;
  *ok = true;
  if (from.empty()) {  // Python inserts `to` between every character and at both ends
    const std::vector<std::string> cps = CodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
      if (out.size() > max_bytes) {
        *ok = false;
        return {};
      }
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
    ++done;
    if (out.size() > max_bytes) {
      *ok = false;
      return {};
    }
  }
  out.append(s.substr(pos));
  if (out.size() > max_bytes) *ok = false;
  return out;
}

// Python's printf-style formatting of one conversion spec applied to a constant.
std::optional<std::string> FormatOne(char conv, std::string_view flags, int width, int precision,
                                     const std::string* s, const int64_t* i) {
  std::string body;
  if (conv == 's') {
    if (s != nullptr) {
      body = *s;
    } else if (i != nullptr) {
      body = std::to_string(*i);
    } else {
      return std::nullopt;
    }
    if (precision >= 0 && static_cast<size_t>(precision) < body.size() && IsAscii(body)) {
      body.resize(static_cast<size_t>(precision));
    }
  } else if (conv == 'd' || conv == 'i' || conv == 'u') {
    if (i == nullptr) return std::nullopt;
    body = std::to_string(*i);
  } else if (conv == 'c') {
    if (i != nullptr) {
      if (*i < 0 || *i > 0x10FFFF) return std::nullopt;
      std::string cp;
      const uint32_t c = static_cast<uint32_t>(*i);
      if (c < 0x80) {
        cp += static_cast<char>(c);
      } else if (c < 0x800) {
        cp += static_cast<char>(0xC0 | (c >> 6));
        cp += static_cast<char>(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        cp += static_cast<char>(0xE0 | (c >> 12));
        cp += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        cp += static_cast<char>(0x80 | (c & 0x3F));
      } else {
        cp += static_cast<char>(0xF0 | (c >> 18));
        cp += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        cp += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        cp += static_cast<char>(0x80 | (c & 0x3F));
      }
      body = cp;
    } else if (s != nullptr && CodePoints(*s).size() == 1) {
      body = *s;
    } else {
      return std::nullopt;
    }
  } else if (conv == 'x' || conv == 'X' || conv == 'o') {
    if (i == nullptr || *i < 0) return std::nullopt;
    body = absl::StrCat(conv == 'o' ? absl::StrFormat("%o", *i) : absl::StrFormat("%x", *i));
    if (conv == 'X') absl::AsciiStrToUpper(&body);
  } else {
    return std::nullopt;
  }
  if (width > 0 && static_cast<size_t>(width) > body.size() && IsAscii(body)) {
    const size_t pad = static_cast<size_t>(width) - body.size();
    if (flags.find('-') != std::string_view::npos) {
      body.append(pad, ' ');
    } else if (flags.find('0') != std::string_view::npos && conv != 's' && conv != 'c') {
      body.insert(0, pad, '0');
    } else {
      body.insert(0, pad, ' ');
    }
  }
  return body;
}

}  // namespace

// ---- strings ------------------------------------------------------------------------------

namespace {
// The origin of a result the evaluation could not fold: the most attacker-chosen of its inputs'
// unknown parts; an input that was all constants is the template's own text.
Origin Unfolded(std::initializer_list<const Value*> inputs) {
  Origin o = Origin::kData;
  bool any_unknown = false;
  for (const Value* v : inputs) {
    if (v == nullptr) continue;
    if (v->bits & kAnyStr) {
      o = std::max(o, v->origin);
      any_unknown = true;
    }
    if (v->bits & (kJson | kAnyInt | kFloat)) any_unknown = true;
    if (v->bits & (kUnknown | kOpaque)) {
      o = std::max(o, Origin::kTemplate);
      any_unknown = true;
    }
  }
  return any_unknown ? o : Origin::kTemplate;
}
}  // namespace

Value Evaluator::ToStr(const Value& v) {
  Value out;
  for (const std::string& s : v.strs) out = ValueJoin(out, Str(s));
  for (int64_t i : v.ints) out = ValueJoin(out, Str(std::to_string(i)));
  if (v.bits & kTrue) out = ValueJoin(out, Str("True"));
  if (v.bits & kFalse) out = ValueJoin(out, Str("False"));
  if (v.bits & kNone) out = ValueJoin(out, Str("None"));
  if (v.bits & kUndefined) out = ValueJoin(out, Str(""));
  if (v.bits & kAnyStr) out = ValueJoin(out, AnyStr(v.origin));
  if (v.bits & (kAnyInt | kFloat | kJson)) out = ValueJoin(out, AnyStr(Origin::kData));
  if (v.bits & (kUnknown | kOpaque)) out = ValueJoin(out, AnyStr(Origin::kTemplate));
  if (!v.objs.empty()) {
    // The repr of a container or of a Jinja object: text the template's author can predict.
    Origin o = Origin::kTemplate;
    for (uint32_t id : v.objs) {
      for (const Value& item : heap_.Get(id).items) {
        if (item.bits & kAnyStr) o = std::max(o, item.origin);
      }
    }
    out = ValueJoin(out, AnyStr(o));
  }
  return out;
}

Value Evaluator::Concat(const Value& a, const Value& b) {
  const Value x = ToStr(a);
  const Value y = ToStr(b);
  Value out;
  if (!x.strs.empty() && !y.strs.empty()) {
    if (x.strs.size() * y.strs.size() <= kMaxConstants) {
      for (const std::string& p : x.strs) {
        for (const std::string& q : y.strs) {
          if (p.size() + q.size() > limits_.max_string_bytes) {
            out = ValueJoin(out, AnyStr(Origin::kTemplate));
          } else {
            out = ValueJoin(out, Str(p + q));
          }
        }
      }
    } else {
      out = ValueJoin(out, AnyStr(Origin::kTemplate));
    }
  }
  if ((x.bits | y.bits) & kAnyStr) {
    Origin o = Origin::kData;
    if (x.bits & kAnyStr) o = std::max(o, x.origin);
    if (y.bits & kAnyStr) o = std::max(o, y.origin);
    out = ValueJoin(out, AnyStr(o));
  }
  if (out.empty()) out = Str("");
  return out;
}

// Applies `f` to each constant string of v (a string result), the rest unfolded.
Value Evaluator::MapStrings(const Value& v, Origin unfolded,
                            const std::function<std::optional<std::string>(const std::string&)>& f) {
  Value out;
  for (const std::string& s : v.strs) {
    std::optional<std::string> r = f(s);
    if (r.has_value() && r->size() <= limits_.max_string_bytes) {
      out = ValueJoin(out, Str(std::move(*r)));
    } else {
      out = ValueJoin(out, AnyStr(Origin::kTemplate));
    }
  }
  if (v.bits & (kAnyStr | kJson | kUnknown | kOpaque | kAnyInt | kFloat) || !v.ints.empty() ||
      !v.objs.empty() || (v.bits & (kTrue | kFalse | kNone | kUndefined))) {
    Value rest = v;
    rest.strs.clear();
    if (!(rest.empty())) out = ValueJoin(out, AnyStr(std::max(unfolded, Unfolded({&rest}))));
  }
  if (out.empty()) out = AnyStr(unfolded);
  return out;
}

namespace {
const std::string* ConstStr(const Value* v) { return v == nullptr ? nullptr : v->OnlyStr(); }
const int64_t* ConstInt(const Value* v) { return v == nullptr ? nullptr : v->OnlyInt(); }
}  // namespace

// str methods on a receiver that may be a string.
Value Evaluator::StrOp(const Value& recv, std::string_view m, const Args& args, uint32_t node) {
  (void)node;
  const Value* a0 = args.pos.size() > 0 ? &args.pos[0] : nullptr;
  const Value* a1 = args.pos.size() > 1 ? &args.pos[1] : nullptr;
  Value strs = recv;  // the string part of the receiver
  strs.objs.clear();
  strs.ints.clear();
  strs.bits &= (kAnyStr | kJson | kUnknown | kOpaque);
  if (strs.bits & kJson) {
    strs.bits &= ~kJson;
    strs = ValueJoin(strs, AnyStr(Origin::kData));
  }
  const Origin o = Unfolded({&strs, a0, a1});
  const auto fold = [&](auto f) { return MapStrings(strs, o, f); };
  const size_t max = limits_.max_string_bytes;
  if (m == "lower" || m == "casefold" || m == "upper" || m == "swapcase" || m == "title" ||
      m == "capitalize") {
    return fold([&](const std::string& s) -> std::optional<std::string> {
      if (!IsAscii(s)) return std::nullopt;
      std::string r = s;
      if (m == "lower" || m == "casefold") absl::AsciiStrToLower(&r);
      if (m == "upper") absl::AsciiStrToUpper(&r);
      if (m == "swapcase") {
        for (char& c : r) {
          const unsigned char u = static_cast<unsigned char>(c);
          c = static_cast<char>(absl::ascii_isupper(u) ? absl::ascii_tolower(u)
                                                       : absl::ascii_toupper(u));
        }
      }
      if (m == "title") r = Title(r);
      if (m == "capitalize") {
        absl::AsciiStrToLower(&r);
        if (!r.empty()) r[0] = static_cast<char>(absl::ascii_toupper(static_cast<unsigned char>(r[0])));
      }
      return r;
    });
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    const std::string* chars = ConstStr(a0);
    const bool ws = a0 == nullptr || (a0->bits == kNone && a0->strs.empty());
    if (!ws && chars == nullptr) return AnyStr(o);
    return fold([&](const std::string& s) -> std::optional<std::string> {
      if (!IsAscii(s) || (chars != nullptr && !IsAscii(*chars))) return std::nullopt;
      return StripChars(s, chars == nullptr ? "" : *chars, m != "rstrip", m != "lstrip", ws);
    });
  }
  if (m == "replace") {
    const std::string* from = ConstStr(a0);
    const std::string* to = ConstStr(a1);
    const int64_t* count = args.pos.size() > 2 ? ConstInt(&args.pos[2]) : nullptr;
    if (from == nullptr || to == nullptr || (args.pos.size() > 2 && count == nullptr)) {
      return AnyStr(o);
    }
    return fold([&](const std::string& s) -> std::optional<std::string> {
      bool ok = true;
      std::string r = Replace(s, *from, *to, count == nullptr ? -1 : *count, max, &ok);
      if (!ok) return std::nullopt;
      return r;
    });
  }
  if (m == "removeprefix" || m == "removesuffix") {
    const std::string* affix = ConstStr(a0);
    if (affix == nullptr) return AnyStr(o);
    return fold([&](const std::string& s) -> std::optional<std::string> {
      if (m == "removeprefix" && s.rfind(*affix, 0) == 0) return s.substr(affix->size());
      if (m == "removesuffix" && s.size() >= affix->size() && !affix->empty() &&
          s.compare(s.size() - affix->size(), affix->size(), *affix) == 0) {
        return s.substr(0, s.size() - affix->size());
      }
      return s;
    });
  }
  if (m == "center" || m == "ljust" || m == "rjust" || m == "zfill") {
    const int64_t* width = ConstInt(a0);
    const std::string* fill = m == "zfill" ? nullptr : ConstStr(a1);
    if (width == nullptr || (a1 != nullptr && fill == nullptr && m != "zfill")) return AnyStr(o);
    const std::string f = fill == nullptr ? (m == "zfill" ? "0" : " ") : *fill;
    if (f.size() != 1 || *width > static_cast<int64_t>(max)) return AnyStr(o);
    return fold([&](const std::string& s) -> std::optional<std::string> {
      if (!IsAscii(s)) return std::nullopt;
      const int64_t pad = *width - static_cast<int64_t>(s.size());
      if (pad <= 0) return s;
      if (m == "ljust") return s + std::string(pad, f[0]);
      if (m == "rjust" || m == "zfill") return std::string(pad, f[0]) + s;
      // str.center: the extra space goes right when pad is odd and the width even, as CPython.
      const int64_t left = pad / 2 + (pad & *width & 1);
      return std::string(left, f[0]) + s + std::string(pad - left, f[0]);
    });
  }
  if (m == "split" || m == "rsplit" || m == "splitlines" || m == "partition" ||
      m == "rpartition") {
    const std::string* sep = ConstStr(a0);
    if (strs.strs.size() == 1 && strs.bits == 0 && (m == "split" || m == "partition") &&
        (sep != nullptr || a0 == nullptr) && args.pos.size() <= 1 && args.kw.empty()) {
      const std::string& s = strs.strs[0];
      std::vector<Value> parts;
      if (m == "partition") {
        if (sep == nullptr || sep->empty()) return Obj(MakeListOf(heap_, AnyStr(o), true));
        const size_t at = s.find(*sep);
        if (at == std::string::npos) {
          parts = {Str(s), Str(""), Str("")};
        } else {
          parts = {Str(s.substr(0, at)), Str(*sep), Str(s.substr(at + sep->size()))};
        }
        return Obj(MakeList(heap_, std::move(parts), true));
      }
      if (sep != nullptr && !sep->empty()) {
        for (absl::string_view piece : absl::StrSplit(s, absl::ByString(*sep))) {
          parts.push_back(Str(std::string(piece)));
        }
      } else if (sep == nullptr && IsAscii(s)) {
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && PySpace(s[i])) ++i;
          if (i >= s.size()) break;
          size_t j = i;
          while (j < s.size() && !PySpace(s[j])) ++j;
          parts.push_back(Str(s.substr(i, j - i)));
          i = j;
        }
      } else {
        return Obj(MakeListOf(heap_, AnyStr(o)));
      }
      if (parts.size() <= 4096) return Obj(MakeList(heap_, std::move(parts)));
    }
    Value element = strs;
    element.strs.clear();
    element = ValueJoin(element, AnyStr(o));
    return Obj(MakeListOf(heap_, element, m == "partition" || m == "rpartition"));
  }
  if (m == "join") {
    const Elements e = Iterate(a0 == nullptr ? Value{} : *a0);
    Value pieces;
    if (e.exact) {
      Value acc = Str("");
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i > 0) acc = Concat(acc, strs);
        acc = Concat(acc, e.items[i]);
      }
      return acc;
    }
    return AnyStr(Unfolded({&strs, &e.element}));
  }
  if (m == "startswith" || m == "endswith" || m.substr(0, 2) == "is") {
    return AnyBool();
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    return AnyInt();
  }
  if (m == "expandtabs" || m == "striptags" || m == "unescape") return AnyStr(o);
  return AnyStr(o);
}

// ---- access -------------------------------------------------------------------------------

Value Evaluator::AccessName(const Value& r, const std::string& name, Via via, uint32_t node,
                            bool called) {
  names_.insert(name);
  const Node& n = tree_.nodes[node];
  const uint32_t at = n.kind == NodeKind::kGetattr || n.kind == NodeKind::kGetitem ||
                              n.kind == NodeKind::kFilter || n.kind == NodeKind::kTest
                          ? static_cast<uint32_t>(n.integer)
                          : n.offset;
  const std::string path = Path(node);
  Value out;
  // Names starting with "_": Python's internals (__class__, __globals__...), name-mangled
  // privates (_TemplateReference__context) and Jinja's runtime internals. The sandbox refuses
  // them all; a plain Environment resolves them on anything, Undefined included
  // (`loop.__class__` outside a loop is jinja2.runtime.Undefined's class).
  if (!name.empty() && name[0] == '_') {
    bool data_only = r.objs.empty() && !(r.bits & (kUnknown | kUndefined | kOpaque));
    for (uint32_t id : r.objs) {
      const ObjKind k = heap_.Get(id).kind;
      data_only = data_only && (k == ObjKind::kList || k == ObjKind::kTuple ||
                                k == ObjKind::kDict || k == ObjKind::kRange);
    }
    if (name.size() >= 2 && name[1] == '_') data_only = false;
    if (!data_only) {
      Report(at, kPlainEnv, Severity::kDangerous, "private_name",
             absl::StrCat("the attribute '", name, "' (Python internals: a route to code "
                          "outside the sandbox) in ", path));
      // The sandbox refuses the name as an attribute, but its lookup falls back to the item:
      // whatever the receiver's __getitem__ (or a class's __class_getitem__) makes of it.
      if (!r.objs.empty()) {
        Report(at, kSandboxEnv, Severity::kSuspicious, "private_name",
               absl::StrCat("the item '", name, "' of a value that is not data in ", path));
      }
      return ValueJoin(Opaque(), Undef());
    }
    Value v = Undef();
    if (r.bits & kJson) v = ValueJoin(v, Json());
    return v;
  }
  const bool only_opaque_or_undefined =
      r.strs.empty() && r.ints.empty() && r.objs.empty() && (r.bits & ~(kOpaque | kUndefined)) == 0;
  if (only_opaque_or_undefined) {
    if (r.bits & kOpaque) out = ValueJoin(out, Opaque());
    if (r.bits & kUndefined) out = ValueJoin(out, Undef());
    return out;
  }
  const bool format = IsFormat(name);
  const auto format_found = [&]() {
    // The format string's fields name attributes and items this reading does not follow.
    unresolved_ = true;
    uint8_t envs = kPlainEnv;
    std::string why;
    if (via == Via::kAttrFilter) {
      envs |= kSandboxEnv;
      why = "; |attr gives the sandbox's callers the raw method (CVE-2025-27516, jinja2 3.1.5)";
    } else if (!called) {
      envs |= kSandboxEnv;
      why = "; a stored reference escapes the sandbox's check when a filter calls it "
            "(CVE-2024-56326, jinja2 < 3.1.5)";
    }
    Report(at, envs, Severity::kDangerous, "format_method",
           absl::StrCat("str.", name, " (its format fields reach any attribute of its "
                                      "arguments) in ",
                        path, why));
    // Called in place, the sandbox formats through its own getattr, whose fallback to items
    // still reaches what is not data (dict['__x__'] is a typing alias): unless every field of
    // a constant format string is a plain index or name, the sandbox is not proven safe.
    if ((envs & kSandboxEnv) == 0) {
      bool fields_reach = (r.bits & (kAnyStr | kJson | kUnknown)) != 0 || r.strs.empty();
      for (const std::string& f : r.strs) {
        bool in_field = false;
        for (char c : f) {
          if (c == '{') in_field = !in_field;  // "{{" is a literal brace
          if (c == '}') in_field = false;
          if (in_field && (c == '.' || c == '[')) fields_reach = true;
        }
      }
      if (fields_reach) {
        Report(at, kSandboxEnv, Severity::kSuspicious, "format_method",
               absl::StrCat("str.", name, " with format fields that take attributes or items "
                                          "of its arguments in ",
                            path));
      }
    }
    out = ValueJoin(out, Opaque());
  };
  const auto other_method = [&]() {
    Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "code_attribute",
           absl::StrCat("the method '", name, "' (outside the data a chat template uses) in ",
                        path));
    out = ValueJoin(out, Opaque());
  };
  const auto method = [&](const Value& receiver) {
    HeapObj m;
    m.kind = ObjKind::kMethod;
    m.name = name;
    m.items.push_back(receiver);
    out = ValueJoin(out, Obj(heap_.Intern(std::move(m))));
  };
  // Scalars.
  if (r.bits & kUndefined) out = ValueJoin(out, Undef());
  if (r.bits & kOpaque) out = ValueJoin(out, Opaque());
  if ((r.bits & (kTrue | kFalse | kAnyInt | kFloat)) || !r.ints.empty()) {
    if (In(kNumMethods, name)) {
      Value recv = AnyInt();
      method(recv);
    } else if (In(kOtherDataMethods, name)) {
      other_method();
    } else {
      out = ValueJoin(out, Undef());
    }
  }
  if (r.bits & kNone) out = ValueJoin(out, Undef());
  // Strings.
  if ((r.bits & kAnyStr) || !r.strs.empty()) {
    Value recv = r;
    recv.bits &= kAnyStr;
    recv.ints.clear();
    recv.objs.clear();
    if (In(kStrMethods, name)) {
      method(recv);
    } else if (format) {
      format_found();
    } else if (In(kOtherDataMethods, name)) {
      other_method();
    } else {
      out = ValueJoin(out, Undef());
    }
  }
  // JSON data: a dict's item, or a method of whatever type it is.
  if (r.bits & kJson) {
    const bool str_m = In(kStrMethods, name);
    const bool list_m = In(kListMethods, name);
    const bool dict_m = In(kDictMethods, name);
    const bool num_m = In(kNumMethods, name);
    if (format) {
      format_found();
    } else if (In(kOtherDataMethods, name)) {
      other_method();
    }
    if (str_m || list_m || dict_m || num_m) method(Json());
    if (via != Via::kAttr || !dict_m) out = ValueJoin(out, Json());
    out = ValueJoin(out, Undef());
  }
  if (r.bits & kUnknown) {
    Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "unknown_value",
           absl::StrCat("the attribute '", name, "' of a value of unknown type in ", path));
    out = ValueJoin(out, Unknown());
  }
  for (uint32_t id : r.objs) {
    const HeapObj o = heap_.Get(id);  // a copy: the heap grows below
    const Value* widened = heap_.Widened(id);
    switch (o.kind) {
      case ObjKind::kList:
      case ObjKind::kTuple:
        if (o.kind == ObjKind::kList ? In(kListMethods, name) : In(kTupleMethods, name)) {
          method(Obj(id));
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kRange:
        if (name == "start" || name == "stop" || name == "step") {
          out = ValueJoin(out, AnyInt());
        } else if (name == "count" || name == "index") {
          method(Obj(id));
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kGroup:
        if (name == "grouper") {
          out = ValueJoin(out, o.items[0]);
        } else if (name == "list") {
          out = ValueJoin(out, o.items[1]);
        } else if (In(kTupleMethods, name)) {
          method(Obj(id));
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kDict: {
        const bool dict_m = In(kDictMethods, name);
        if (name == "fromkeys") {
          other_method();
          break;
        }
        if (via == Via::kAttr && dict_m) {
          method(Obj(id));
          break;
        }
        bool found = false;
        if (o.exact) {
          for (size_t i = 0; i < o.keys.size(); ++i) {
            if (o.keys[i] == name) {
              out = ValueJoin(out, o.items[i]);
              found = true;
            }
          }
        } else if (o.items.size() == 2) {
          const Value& keys = o.items[0];
          if ((keys.bits & (kAnyStr | kJson | kUnknown)) ||
              std::find(keys.strs.begin(), keys.strs.end(), name) != keys.strs.end()) {
            out = ValueJoin(out, o.items[1]);
          }
        }
        if (widened != nullptr) out = ValueJoin(out, *widened);
        if (!found || !o.exact || widened != nullptr) {
          if (dict_m) {
            method(Obj(id));
          } else {
            out = ValueJoin(out, Undef());
          }
        }
        break;
      }
      case ObjKind::kNamespace: {
        auto attrs = st_.ns.find(id);
        if (attrs == st_.ns.end()) {
          out = ValueJoin(out, Undef());
          break;
        }
        auto it = attrs->second.find(name);
        auto any = attrs->second.find(std::string(1, '\x01'));
        if (it != attrs->second.end()) out = ValueJoin(out, it->second);
        if (any != attrs->second.end()) out = ValueJoin(out, any->second);
        if (it == attrs->second.end()) out = ValueJoin(out, Undef());
        break;
      }
      case ObjKind::kLoop: {
        if (!In(kLoopAttrs, name)) {
          out = ValueJoin(out, Undef());
        } else if (name == "index0") {
          out = ValueJoin(out, o.items[1]);
        } else if (name == "index") {
          out = ValueJoin(out, BinOp(Tok::kAdd, o.items[1], Int(1)));
        } else if (name == "length") {
          out = ValueJoin(out, o.items[2]);
        } else if (name == "revindex0") {
          out = ValueJoin(out, BinOp(Tok::kSub, BinOp(Tok::kSub, o.items[2], o.items[1]), Int(1)));
        } else if (name == "revindex") {
          out = ValueJoin(out, BinOp(Tok::kSub, o.items[2], o.items[1]));
        } else if (name == "previtem") {
          out = ValueJoin(out, o.items[3]);
        } else if (name == "nextitem") {
          out = ValueJoin(out, o.items[4]);
        } else if (name == "first") {
          out = ValueJoin(out, o.items[5]);
        } else if (name == "last") {
          out = ValueJoin(out, o.items[6]);
        } else if (name == "depth" || name == "depth0") {
          out = ValueJoin(out, AnyInt());
        } else {
          method(Obj(id));
        }
        break;
      }
      case ObjKind::kMacro:
      case ObjKind::kCaller:
        if (name == "name") {
          out = ValueJoin(out, Str(o.kind == ObjKind::kMacro ? tree_.nodes[o.node].text
                                                              : std::string("caller")));
        } else if (name == "arguments") {
          std::vector<Value> params;
          for (uint32_t p : tree_.nodes[o.node].list2) params.push_back(Str(tree_.nodes[p].text));
          out = ValueJoin(out, Obj(MakeList(heap_, std::move(params), true)));
        } else if (name == "catch_kwargs" || name == "catch_varargs" || name == "caller") {
          out = ValueJoin(out, AnyBool());
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kMethod:
        out = ValueJoin(out, Undef());
        break;
      case ObjKind::kCycler:
        if (name == "next" || name == "reset") {
          method(Obj(id));
        } else if (name == "current") {
          out = ValueJoin(out, o.items[0]);
        } else if (name == "items") {
          out = ValueJoin(out, Obj(MakeListOf(heap_, o.items[0], true)));
        } else if (name == "pos") {
          out = ValueJoin(out, AnyInt());
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kJoiner:
        if (name == "sep") {
          out = ValueJoin(out, o.items[0]);
        } else if (name == "used") {
          out = ValueJoin(out, AnyBool());
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kGlobal: {
        if (o.name == "self") {  // TemplateReference: the template's blocks by name
          HeapObj b;
          b.kind = ObjKind::kGlobal;
          b.name = "block";
          out = ValueJoin(out, ValueJoin(Obj(heap_.Intern(std::move(b))), Undef()));
          break;
        }
        if (name == "mro" && o.name != "lipsum" && o.name != "raise_exception" &&
            o.name != "strftime_now" && o.name != "block") {
          Report(at, kPlainEnv, Severity::kDangerous, "code_attribute",
                 absl::StrCat("type.mro of the global '", o.name,
                              "' (the class hierarchy: a route to code outside the sandbox) "
                              "in ",
                              path));
          // The sandbox refuses type.mro as an attribute, not as an item (dict['mro'] is a
          // typing alias): not data.
          if (via != Via::kAttr) {
            Report(at, kSandboxEnv, Severity::kSuspicious, "code_attribute",
                   absl::StrCat("the item 'mro' of the global '", o.name, "' (not data) in ",
                                path));
          }
        } else {
          Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "code_attribute",
                 absl::StrCat("the attribute '", name, "' of the ",
                              o.name == "block" ? std::string("template's block")
                                                : absl::StrCat("global '", o.name, "'"),
                              " (a function or class, not data) in ", path));
        }
        out = ValueJoin(out, ValueJoin(Opaque(), Undef()));
        break;
      }
    }
  }
  return out;
}

Value Evaluator::Index(const Value& r, const Value& key) {
  Value out;
  const int64_t* k = key.OnlyInt();
  if (r.bits & (kUndefined | kNone | kTrue | kFalse | kAnyInt | kFloat) || !r.ints.empty()) {
    out = ValueJoin(out, Undef());
  }
  if (r.bits & kOpaque) out = ValueJoin(out, Opaque());
  if (r.bits & kJson) out = ValueJoin(out, ValueJoin(Json(), Undef()));
  if (r.bits & kUnknown) out = ValueJoin(out, Unknown());
  if (r.bits & kAnyStr) out = ValueJoin(out, ValueJoin(AnyStr(r.origin), Undef()));
  for (const std::string& s : r.strs) {
    const std::vector<std::string> cps = CodePoints(s);
    if (k != nullptr) {
      const int64_t n = static_cast<int64_t>(cps.size());
      const int64_t i = *k < 0 ? *k + n : *k;
      out = ValueJoin(out, i >= 0 && i < n ? Str(cps[static_cast<size_t>(i)]) : Undef());
    } else if (cps.size() <= kMaxConstants) {
      for (const std::string& c : cps) out = ValueJoin(out, Str(c));
      out = ValueJoin(out, Undef());
    } else {
      out = ValueJoin(out, ValueJoin(AnyStr(Origin::kTemplate), Undef()));
    }
  }
  for (uint32_t id : r.objs) {
    const HeapObj o = heap_.Get(id);
    const Value* widened = heap_.Widened(id);
    if (o.kind == ObjKind::kList || o.kind == ObjKind::kTuple || o.kind == ObjKind::kRange ||
        o.kind == ObjKind::kGroup) {
      if (o.exact && widened == nullptr && k != nullptr) {
        const int64_t n = static_cast<int64_t>(o.items.size());
        const int64_t i = *k < 0 ? *k + n : *k;
        out = ValueJoin(out, i >= 0 && i < n ? o.items[static_cast<size_t>(i)] : Undef());
      } else {
        for (const Value& item : o.items) out = ValueJoin(out, item);
        if (o.kind == ObjKind::kRange && !o.exact) out = ValueJoin(out, AnyInt());
        if (widened != nullptr) out = ValueJoin(out, *widened);
        out = ValueJoin(out, Undef());
      }
    } else if (o.kind == ObjKind::kDict && !o.exact && o.items.size() == 2) {
      out = ValueJoin(out, ValueJoin(o.items[1], Undef()));
    } else {
      out = ValueJoin(out, Undef());
    }
  }
  return out;
}

Value Evaluator::Access(const Value& r, const Value& key, Via via, uint32_t node, bool called) {
  Value out;
  for (const std::string& s : key.strs) out = ValueJoin(out, AccessName(r, s, via, node, called));
  Value numeric;
  numeric.ints = key.ints;
  numeric.bits = key.bits & (kAnyInt | kTrue | kFalse);
  if (!numeric.empty()) {
    if (key.bits & (kTrue | kFalse)) numeric = ValueJoin(numeric, AnyInt());
    out = ValueJoin(out, Index(r, numeric));
  }
  if (key.bits & (kFloat | kNone | kUndefined)) {
    out = ValueJoin(out, Undef());
    if (r.bits & kJson) out = ValueJoin(out, Json());
  }
  if (!key.objs.empty()) out = ValueJoin(out, Undef());
  if (key.bits & kOpaque) out = ValueJoin(out, Opaque());
  if (key.bits & (kAnyStr | kJson | kUnknown)) {
    const bool receiver_matters =
        !(r.strs.empty() && r.ints.empty() && r.objs.empty() &&
          (r.bits & ~(kOpaque | kUndefined)) == 0);
    Origin o = Origin::kData;
    if (key.bits & kAnyStr) o = std::max(o, key.origin);
    if (key.bits & kUnknown) o = std::max(o, Origin::kTemplate);
    if (receiver_matters) {
      unresolved_ = true;
      const Node& n = tree_.nodes[node];
      const uint32_t at = (n.kind == NodeKind::kGetitem || n.kind == NodeKind::kFilter)
                              ? static_cast<uint32_t>(n.integer)
                              : n.offset;
      const uint8_t envs = kPlainEnv | (via == Via::kAttrFilter ? kSandboxEnv : 0);
      const char* who = o == Origin::kToken      ? "the model's special tokens"
                        : o == Origin::kTemplate ? "a string the template builds"
                                                 : "the user's data";
      Report(at, envs, o == Origin::kData ? Severity::kSuspicious : Severity::kDangerous,
             o == Origin::kData ? "data_name" : "built_name",
             absl::StrCat("an attribute or item named by ", who,
                          " (not a constant: outside the sandbox a missing item falls back to "
                          "any attribute) in ",
                          Path(node)));
      // In the sandbox too, an item of something that is not data (a class's
      // __class_getitem__, a function) is not data, whatever its name.
      bool code_receiver = false;
      for (uint32_t id : r.objs) {
        const ObjKind k = heap_.Get(id).kind;
        code_receiver = code_receiver || k == ObjKind::kGlobal;
      }
      if (code_receiver) {
        Report(at, kSandboxEnv, Severity::kSuspicious, "code_attribute",
               absl::StrCat("an item of a global function or class, named by ", who, ", in ",
                            Path(node)));
      }
    }
    out = ValueJoin(out, ValueJoin(Json(), ValueJoin(Undef(), Opaque())));
    if (r.bits & kJson) out = ValueJoin(out, Json());
  }
  if (out.empty()) out = Undef();
  return out;
}

Value Evaluator::AttrGetter(const Value& item, const Value& attribute, uint32_t node) {
  Value out;
  for (const std::string& a : attribute.strs) {
    Value cur = item;
    for (absl::string_view part : absl::StrSplit(a, '.')) {
      const std::string p(part);
      if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
          p.size() < 18) {
        cur = Index(cur, Int(std::stoll(p)));
      } else {
        cur = AccessName(cur, p, Via::kAttrGetter, node, false);
      }
    }
    out = ValueJoin(out, cur);
  }
  Value rest = attribute;
  rest.strs.clear();
  if (!rest.empty()) out = ValueJoin(out, Access(item, rest, Via::kAttrGetter, node, false));
  return out;
}

// ---- iteration, truth, operators ---------------------------------------------------------

Elements Evaluator::Iterate(const Value& v) {
  Elements e;
  size_t alternatives = 0;
  const auto add_exact = [&](std::vector<Value> items) {
    ++alternatives;
    for (const Value& x : items) e.element = ValueJoin(e.element, x);
    e.items = std::move(items);
  };
  const auto add_summary = [&](const Value& x) {
    alternatives += 2;  // never exact
    e.element = ValueJoin(e.element, x);
  };
  for (const std::string& s : v.strs) {
    std::vector<Value> chars;
    for (std::string& c : CodePoints(s)) chars.push_back(Str(std::move(c)));
    add_exact(std::move(chars));
  }
  if (v.bits & kAnyStr) add_summary(AnyStr(v.origin));
  if (v.bits & kJson) add_summary(Json());
  if (v.bits & kUnknown) add_summary(Unknown());
  if (v.bits & kOpaque) add_summary(Opaque());
  for (uint32_t id : v.objs) {
    const HeapObj o = heap_.Get(id);
    const Value* widened = heap_.Widened(id);
    switch (o.kind) {
      case ObjKind::kList:
      case ObjKind::kTuple:
      case ObjKind::kRange:
        if (o.exact && widened == nullptr) {
          add_exact(o.items);
        } else {
          Value el;
          for (const Value& x : o.items) el = ValueJoin(el, x);
          if (o.kind == ObjKind::kRange && !o.exact) el = ValueJoin(el, AnyInt());
          if (widened != nullptr) el = ValueJoin(el, *widened);
          add_summary(el);
        }
        break;
      case ObjKind::kDict:
        if (o.exact && widened == nullptr) {
          std::vector<Value> keys;
          for (const std::string& k : o.keys) keys.push_back(Str(k));
          add_exact(std::move(keys));
        } else {
          Value keys = o.exact ? Value{} : o.items[0];
          for (const std::string& k : o.keys) keys = ValueJoin(keys, Str(k));
          if (widened != nullptr) keys = ValueJoin(keys, *widened);
          add_summary(keys);
        }
        break;
      case ObjKind::kGroup:
        add_exact({o.items[0], o.items[1]});
        break;
      default:
        break;  // not iterable: Jinja fails, nothing is reached
    }
  }
  if (alternatives == 0) {
    e.exact = true;  // Undefined and None iterate as nothing (None fails: nothing either)
    return e;
  }
  e.exact = alternatives == 1 && !(v.bits & (kAnyStr | kJson | kUnknown | kOpaque)) &&
            e.items.size() <= 1u << 16;
  if (!e.exact) e.items.clear();
  return e;
}

std::optional<bool> Evaluator::Truth(const Value& v) const {
  bool may_true = false, may_false = false;
  if (v.bits & kTrue) may_true = true;
  if (v.bits & (kFalse | kNone | kUndefined)) may_false = true;
  if (v.bits & (kAnyInt | kFloat | kAnyStr | kJson | kUnknown | kOpaque)) {
    may_true = may_false = true;
  }
  for (const std::string& s : v.strs) (s.empty() ? may_false : may_true) = true;
  for (int64_t i : v.ints) (i == 0 ? may_false : may_true) = true;
  for (uint32_t id : v.objs) {
    const HeapObj& o = heap_.Get(id);
    if ((o.kind == ObjKind::kList || o.kind == ObjKind::kTuple || o.kind == ObjKind::kDict) &&
        o.exact && heap_.Widened(id) == nullptr) {
      (o.items.empty() ? may_false : may_true) = true;
    } else if (o.kind == ObjKind::kList || o.kind == ObjKind::kTuple ||
               o.kind == ObjKind::kDict || o.kind == ObjKind::kRange) {
      may_true = may_false = true;
    } else {
      may_true = true;  // objects are true
    }
  }
  if (may_true && !may_false) return true;
  if (may_false && !may_true) return false;
  return std::nullopt;
}

Value Evaluator::BinOp(Tok op, const Value& a, const Value& b) {
  Value out;
  const bool a_str = a.MayBeStr() || (a.bits & kOpaque);
  const bool b_str = b.MayBeStr() || (b.bits & kOpaque);
  const bool a_num = (a.bits & (kAnyInt | kFloat | kTrue | kFalse | kJson | kUnknown)) ||
                     !a.ints.empty();
  const bool b_num = (b.bits & (kAnyInt | kFloat | kTrue | kFalse | kJson | kUnknown)) ||
                     !b.ints.empty();
  // Integer constants.
  if (!a.ints.empty() && !b.ints.empty() && a.ints.size() * b.ints.size() <= kMaxConstants) {
    for (int64_t x : a.ints) {
      for (int64_t y : b.ints) {
        int64_t r = 0;
        bool ok = true;
        switch (op) {
          case Tok::kAdd:
            ok = !__builtin_add_overflow(x, y, &r);
            break;
          case Tok::kSub:
            ok = !__builtin_sub_overflow(x, y, &r);
            break;
          case Tok::kMul:
            ok = !__builtin_mul_overflow(x, y, &r);
            break;
          case Tok::kFloorDiv:
          case Tok::kMod:
            if (y == 0 || (x == INT64_MIN && y == -1)) {
              ok = false;
              break;
            }
            r = op == Tok::kFloorDiv ? x / y : x % y;
            if (op == Tok::kFloorDiv && (x % y != 0) && ((x < 0) != (y < 0))) --r;
            if (op == Tok::kMod && r != 0 && ((r < 0) != (y < 0))) r += y;
            break;
          default:
            ok = false;
        }
        out = ValueJoin(out, ok ? Int(r) : (op == Tok::kDiv ? Bits(kFloat) : AnyInt()));
      }
    }
  } else if (a_num && b_num) {
    out = ValueJoin(out, op == Tok::kDiv ? Bits(kFloat) : ValueJoin(AnyInt(), Bits(kFloat)));
  }
  if (op == Tok::kAdd && a_str && b_str) {
    Value x = a, y = b;
    x.ints.clear();
    y.ints.clear();
    x.objs.clear();
    y.objs.clear();
    x.bits &= (kAnyStr | kJson | kUnknown | kOpaque);
    y.bits &= (kAnyStr | kJson | kUnknown | kOpaque);
    out = ValueJoin(out, Concat(x, y));
  }
  if (op == Tok::kAdd) {
    // Lists: concatenated (exactly when both are).
    for (uint32_t i : a.objs) {
      for (uint32_t j : b.objs) {
        const HeapObj x = heap_.Get(i);
        const HeapObj y = heap_.Get(j);
        if ((x.kind != ObjKind::kList && x.kind != ObjKind::kTuple) || x.kind != y.kind) continue;
        const bool tuple = x.kind == ObjKind::kTuple;
        if (x.exact && y.exact && heap_.Widened(i) == nullptr && heap_.Widened(j) == nullptr &&
            x.items.size() + y.items.size() <= 4096) {
          std::vector<Value> items = x.items;
          items.insert(items.end(), y.items.begin(), y.items.end());
          out = ValueJoin(out, Obj(MakeList(heap_, std::move(items), tuple)));
        } else {
          Value el;
          for (const Value& v : x.items) el = ValueJoin(el, v);
          for (const Value& v : y.items) el = ValueJoin(el, v);
          if (const Value* w = heap_.Widened(i)) el = ValueJoin(el, *w);
          if (const Value* w = heap_.Widened(j)) el = ValueJoin(el, *w);
          out = ValueJoin(out, Obj(MakeListOf(heap_, el, tuple)));
        }
      }
    }
    if ((a.bits & kJson) || (b.bits & kJson)) out = ValueJoin(out, Json());
  }
  if (op == Tok::kMul) {
    // str * int: repetition.
    const Value& s = a.MayBeStr() ? a : b;
    const Value& n = a.MayBeStr() ? b : a;
    if (s.MayBeStr() && (!n.ints.empty() || (n.bits & (kAnyInt | kJson | kUnknown)))) {
      const int64_t* count = n.OnlyInt();
      if (count != nullptr && !s.strs.empty() && !(s.bits & kAnyStr)) {
        for (const std::string& x : s.strs) {
          if (*count <= 0) {
            out = ValueJoin(out, Str(""));
          } else if (static_cast<uint64_t>(*count) * x.size() <= limits_.max_string_bytes) {
            std::string r;
            for (int64_t k = 0; k < *count; ++k) r += x;
            out = ValueJoin(out, Str(std::move(r)));
          } else {
            out = ValueJoin(out, AnyStr(Origin::kTemplate));
          }
        }
      } else {
        out = ValueJoin(out, AnyStr(Unfolded({&s, &n})));
      }
    }
    for (uint32_t id : a.objs) {
      const HeapObj x = heap_.Get(id);
      if (x.kind != ObjKind::kList && x.kind != ObjKind::kTuple) continue;
      Value el;
      for (const Value& v : x.items) el = ValueJoin(el, v);
      out = ValueJoin(out, Obj(MakeListOf(heap_, el, x.kind == ObjKind::kTuple)));
    }
  }
  if (op == Tok::kMod && a.MayBeStr()) {
    // printf-style formatting: folded for constant formats and arguments.
    std::vector<const Value*> args;
    bool tuple_exact = true;
    std::vector<Value> items;
    if (b.objs.size() == 1 && b.bits == 0 && b.strs.empty() && b.ints.empty() &&
        heap_.Get(b.objs[0]).kind == ObjKind::kTuple) {
      const HeapObj t = heap_.Get(b.objs[0]);
      tuple_exact = t.exact && heap_.Widened(b.objs[0]) == nullptr;
      items = t.items;
    } else {
      items = {b};
    }
    bool folded = false;
    if (tuple_exact && !a.strs.empty() && !(a.bits & (kAnyStr | kJson | kUnknown))) {
      for (const Value& x : items) args.push_back(&x);
      folded = true;
      for (const std::string& fmt : a.strs) {
        std::string r;
        size_t arg = 0;
        bool ok = true;
        for (size_t i = 0; i < fmt.size() && ok; ++i) {
          if (fmt[i] != '%') {
            r += fmt[i];
            continue;
          }
          size_t j = i + 1;
          std::string flags;
          while (j < fmt.size() && std::string_view("-+ #0").find(fmt[j]) != std::string_view::npos) {
            flags += fmt[j++];
          }
          int width = 0, precision = -1;
          while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9' && width < 100000) {
            width = width * 10 + (fmt[j++] - '0');
          }
          if (j < fmt.size() && fmt[j] == '.') {
            precision = 0;
            ++j;
            while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9' && precision < 100000) {
              precision = precision * 10 + (fmt[j++] - '0');
            }
          }
          if (j >= fmt.size()) {
            ok = false;
            break;
          }
          if (fmt[j] == '%') {
            r += '%';
            i = j;
            continue;
          }
          if (arg >= args.size()) {
            ok = false;
            break;
          }
          const Value& x = *args[arg++];
          std::optional<std::string> piece =
              FormatOne(fmt[j], flags, width, precision, x.OnlyStr(), x.OnlyInt());
          if (!piece.has_value() || r.size() + piece->size() > limits_.max_string_bytes) {
            ok = false;
            break;
          }
          r += *piece;
          i = j;
        }
        out = ValueJoin(out, ok ? Str(std::move(r)) : AnyStr(Origin::kTemplate));
      }
      Value rest = a;
      rest.strs.clear();
      if (!rest.empty()) out = ValueJoin(out, AnyStr(Unfolded({&rest, &b})));
    }
    if (!folded) {
      Value args_union;
      for (const Value& x : items) args_union = ValueJoin(args_union, x);
      out = ValueJoin(out, AnyStr(Unfolded({&a, &args_union})));
    }
  }
  if (out.empty()) out = Undef();  // a TypeError: the render stops
  return out;
}

Value Evaluator::Slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  Value out;
  const auto bound = [](const Value& x, bool* known, int64_t* value) {
    if (x.bits == kNone && x.strs.empty() && x.ints.empty() && x.objs.empty()) {
      *known = true;
      return false;  // None
    }
    const int64_t* i = x.OnlyInt();
    *known = i != nullptr;
    if (i != nullptr) *value = *i;
    return i != nullptr;
  };
  bool k1, k2, k3;
  int64_t b1 = 0, b2 = 0, b3 = 1;
  const bool h1 = bound(start, &k1, &b1), h2 = bound(stop, &k2, &b2), h3 = bound(step, &k3, &b3);
  const bool known = k1 && k2 && k3 && (!h3 || b3 != 0);
  // Python's slice.indices for a sequence of length n.
  const auto indices = [&](int64_t n, std::vector<int64_t>* out_idx) {
    const int64_t st = h3 ? b3 : 1;
    int64_t lo, hi;
    if (st > 0) {
      lo = h1 ? (b1 < 0 ? std::max<int64_t>(0, b1 + n) : std::min(b1, n)) : 0;
      hi = h2 ? (b2 < 0 ? std::max<int64_t>(0, b2 + n) : std::min(b2, n)) : n;
      for (int64_t i = lo; i < hi; i += st) out_idx->push_back(i);
    } else {
      lo = h1 ? (b1 < 0 ? std::max<int64_t>(-1, b1 + n) : std::min(b1, n - 1)) : n - 1;
      hi = h2 ? (b2 < 0 ? std::max<int64_t>(-1, b2 + n) : std::min(b2, n - 1)) : -1;
      for (int64_t i = lo; i > hi; i += st) out_idx->push_back(i);
    }
  };
  for (const std::string& s : v.strs) {
    if (!known) {
      out = ValueJoin(out, AnyStr(Origin::kTemplate));
      continue;
    }
    const std::vector<std::string> cps = CodePoints(s);
    std::vector<int64_t> idx;
    indices(static_cast<int64_t>(cps.size()), &idx);
    std::string r;
    for (int64_t i : idx) r += cps[static_cast<size_t>(i)];
    out = ValueJoin(out, Str(std::move(r)));
  }
  if (v.bits & kAnyStr) out = ValueJoin(out, AnyStr(v.origin));
  if (v.bits & kJson) out = ValueJoin(out, Json());
  if (v.bits & kUnknown) out = ValueJoin(out, Unknown());
  if (v.bits & kOpaque) out = ValueJoin(out, Opaque());
  if (v.bits & kUndefined) out = ValueJoin(out, Undef());
  for (uint32_t id : v.objs) {
    const HeapObj o = heap_.Get(id);
    if (o.kind != ObjKind::kList && o.kind != ObjKind::kTuple && o.kind != ObjKind::kRange) {
      out = ValueJoin(out, Undef());
      continue;
    }
    const bool tuple = o.kind == ObjKind::kTuple;
    if (o.exact && known && heap_.Widened(id) == nullptr) {
      std::vector<int64_t> idx;
      indices(static_cast<int64_t>(o.items.size()), &idx);
      std::vector<Value> items;
      for (int64_t i : idx) items.push_back(o.items[static_cast<size_t>(i)]);
      out = ValueJoin(out, Obj(MakeList(heap_, std::move(items), tuple)));
    } else {
      Value el;
      for (const Value& x : o.items) el = ValueJoin(el, x);
      if (const Value* w = heap_.Widened(id)) el = ValueJoin(el, *w);
      out = ValueJoin(out, Obj(MakeListOf(heap_, el, tuple)));
    }
  }
  if (out.empty()) out = Undef();
  return out;
}

void Evaluator::Mutate(const Value& container, const Value& added) {
  for (uint32_t id : container.objs) {
    const ObjKind k = heap_.Get(id).kind;
    if (k == ObjKind::kList || k == ObjKind::kDict) heap_.Widen(id, added);
  }
}

// ---- calls ------------------------------------------------------------------------------

Value Evaluator::NewNamespace(uint32_t node, const Args& args) {
  HeapObj o;
  o.kind = ObjKind::kNamespace;
  o.node = node;
  const uint32_t id = heap_.Intern(std::move(o));
  std::map<std::string, Value> attrs;
  if (!args.pos.empty()) {
    const Value& init = args.pos[0];
    bool exact = init.objs.size() == 1 && init.bits == 0;
    if (exact) {
      const HeapObj d = heap_.Get(init.objs[0]);
      exact = d.kind == ObjKind::kDict && d.exact && heap_.Widened(init.objs[0]) == nullptr;
      if (exact) {
        for (size_t i = 0; i < d.keys.size(); ++i) attrs[d.keys[i]] = d.items[i];
      }
    }
    if (!exact) attrs[std::string(1, '\x01')] = ValueJoin(Json(), Unknown());
  }
  for (const auto& [k, v] : args.kw) attrs[k] = v;
  if (args.starstar.has_value()) attrs[std::string(1, '\x01')] = ValueJoin(Json(), Unknown());
  auto it = st_.ns.find(id);
  if (it == st_.ns.end()) {
    st_.ns[id] = std::move(attrs);
  } else {  // created here before (a loop): both namespaces may be alive
    for (auto& [k, v] : it->second) {
      auto a = attrs.find(k);
      v = ValueJoin(v, a != attrs.end() ? a->second : Undef());
    }
    for (auto& [k, v] : attrs) {
      if (it->second.count(k) == 0) it->second[k] = ValueJoin(v, Undef());
    }
  }
  return Obj(id);
}

Value Evaluator::Call(const Value& callee, const Args& args, uint32_t node) {
  Value out;
  const Node& n = tree_.nodes[node];
  if (callee.bits & kUnknown) {
    Report(n.offset, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "unknown_value",
           absl::StrCat("a call of a value of unknown type in ", Path(node)));
    out = ValueJoin(out, Unknown());
  }
  if (callee.bits & kOpaque) out = ValueJoin(out, Opaque());
  if (callee.bits & ~(kUnknown | kOpaque) || !callee.strs.empty() || !callee.ints.empty()) {
    out = ValueJoin(out, Undef());  // calling data: a TypeError
  }
  for (uint32_t id : callee.objs) {
    const HeapObj o = heap_.Get(id);
    switch (o.kind) {
      case ObjKind::kGlobal:
        if (o.name == "range") {
          std::vector<int64_t> b;
          for (const Value& a : args.pos) {
            const int64_t* i = a.OnlyInt();
            if (i == nullptr) break;
            b.push_back(*i);
          }
          HeapObj r;
          r.kind = ObjKind::kRange;
          if (b.size() == args.pos.size() && !b.empty() && b.size() <= 3 && args.kw.empty()) {
            const int64_t start = b.size() == 1 ? 0 : b[0];
            const int64_t stop = b.size() == 1 ? b[0] : b[1];
            const int64_t step = b.size() == 3 ? b[2] : 1;
            std::vector<Value> items;
            bool ok = step != 0;
            for (int64_t i = start; ok && (step > 0 ? i < stop : i > stop); i += step) {
              if (items.size() >= 4096) {
                ok = false;
                break;
              }
              items.push_back(Int(i));
            }
            if (ok) {
              r.exact = true;
              r.items = std::move(items);
            }
          }
          out = ValueJoin(out, Obj(heap_.Intern(std::move(r))));
        } else if (o.name == "dict") {
          std::vector<std::string> keys;
          std::vector<Value> values;
          bool exact = args.pos.empty() && !args.star.has_value() && !args.starstar.has_value();
          for (const auto& [k, v] : args.kw) {
            keys.push_back(k);
            values.push_back(v);
          }
          if (exact) {
            out = ValueJoin(out, Obj(MakeDict(heap_, std::move(keys), std::move(values))));
          } else {
            Value kk = AnyStr(Origin::kData), vv = Json();
            for (const std::string& k : keys) kk = ValueJoin(kk, Str(k));
            for (const Value& v : values) vv = ValueJoin(vv, v);
            for (const Value& p : args.pos) {
              const Elements e = Iterate(p);
              vv = ValueJoin(vv, Index(e.element, AnyInt()));
              kk = ValueJoin(kk, e.element);
            }
            out = ValueJoin(out, Obj(MakeDictOf(heap_, kk, vv)));
          }
        } else if (o.name == "namespace") {
          out = ValueJoin(out, NewNamespace(node, args));
        } else if (o.name == "lipsum" || o.name == "block") {
          out = ValueJoin(out, AnyStr(Origin::kTemplate));
        } else if (o.name == "cycler") {
          HeapObj c;
          c.kind = ObjKind::kCycler;
          Value items;
          for (const Value& a : args.pos) items = ValueJoin(items, a);
          if (args.star.has_value()) items = ValueJoin(items, Iterate(*args.star).element);
          c.items.push_back(items);
          out = ValueJoin(out, Obj(heap_.Intern(std::move(c))));
        } else if (o.name == "joiner") {
          HeapObj j;
          j.kind = ObjKind::kJoiner;
          j.items.push_back(args.pos.empty() ? (args.Kw("sep") ? *args.Kw("sep") : Str(", "))
                                             : args.pos[0]);
          out = ValueJoin(out, Obj(heap_.Intern(std::move(j))));
        } else if (o.name == "raise_exception") {
          st_.dead = true;
          out = ValueJoin(out, Undef());
        } else if (o.name == "strftime_now") {
          out = ValueJoin(out, AnyStr(Origin::kData));
        } else {
          out = ValueJoin(out, Undef());
        }
        break;
      case ObjKind::kMethod:
        out = ValueJoin(out, Method(o, args, node));
        break;
      case ObjKind::kJoiner:
        out = ValueJoin(out, ValueJoin(ToStr(o.items[0]), Str("")));
        break;
      default:
        out = ValueJoin(out, Undef());
        break;
    }
  }
  if (out.empty()) out = Undef();
  return out;
}

Value Evaluator::Method(const HeapObj& m, const Args& args, uint32_t node) {
  const Value& recv = m.items[0];
  const std::string& name = m.name;
  Value out;
  Value added;
  for (const Value& a : args.pos) added = ValueJoin(added, a);
  for (const auto& [k, v] : args.kw) added = ValueJoin(added, v);
  // Strings (and JSON data that may be one).
  if (recv.MayBeStr() && In(kStrMethods, name)) out = ValueJoin(out, StrOp(recv, name, args, node));
  if (recv.bits & kJson) {
    if (name == "get") {
      out = ValueJoin(out, ValueJoin(Json(), args.pos.size() > 1 ? args.pos[1] : NoneValue()));
    } else if (name == "items") {
      out = ValueJoin(
          out, Obj(MakeListOf(heap_, Obj(MakeList(heap_, {AnyStr(Origin::kData), Json()}, true)))));
    } else if (name == "keys") {
      out = ValueJoin(out, Obj(MakeListOf(heap_, AnyStr(Origin::kData))));
    } else if (name == "values" || name == "copy") {
      out = ValueJoin(out, Obj(MakeListOf(heap_, Json())));
      if (name == "copy") out = ValueJoin(out, Json());
    } else if (In(kListMethods, name) || In(kDictMethods, name)) {
      out = ValueJoin(out, ValueJoin(Json(), NoneValue()));
    } else if (In(kNumMethods, name)) {
      out = ValueJoin(out, ValueJoin(AnyInt(), AnyBool()));
    }
  }
  if ((recv.bits & (kAnyInt | kFloat | kTrue | kFalse)) || !recv.ints.empty()) {
    out = ValueJoin(out, ValueJoin(AnyInt(), Bits(kFloat)));
  }
  for (uint32_t id : recv.objs) {
    const HeapObj o = heap_.Get(id);
    const Value* widened = heap_.Widened(id);
    Value element;
    for (const Value& x : o.items) element = ValueJoin(element, x);
    if (widened != nullptr) element = ValueJoin(element, *widened);
    switch (o.kind) {
      case ObjKind::kList:
        if (name == "append" || name == "extend" || name == "insert") {
          Value add = name == "extend" ? Iterate(added).element
                                       : (args.pos.empty() ? Value{} : args.pos.back());
          Mutate(Obj(id), add);
          out = ValueJoin(out, NoneValue());
        } else if (name == "pop") {
          Mutate(Obj(id), Value{});
          out = ValueJoin(out, ValueJoin(element, Undef()));
        } else if (name == "copy") {
          out = ValueJoin(out, Obj(id));
        } else if (name == "count" || name == "index") {
          out = ValueJoin(out, AnyInt());
        } else {
          Mutate(Obj(id), Value{});
          out = ValueJoin(out, NoneValue());
        }
        break;
      case ObjKind::kTuple:
      case ObjKind::kRange:
      case ObjKind::kGroup:
        out = ValueJoin(out, AnyInt());
        break;
      case ObjKind::kDict: {
        Value keys, values;
        if (o.exact) {
          for (const std::string& k : o.keys) keys = ValueJoin(keys, Str(k));
          for (const Value& v : o.items) values = ValueJoin(values, v);
        } else if (o.items.size() == 2) {
          keys = o.items[0];
          values = o.items[1];
        }
        if (widened != nullptr) {
          keys = ValueJoin(keys, *widened);
          values = ValueJoin(values, *widened);
        }
        if (name == "get" || name == "pop" || name == "setdefault") {
          Value r = ValueJoin(values, args.pos.size() > 1 ? args.pos[1] : NoneValue());
          if (const std::string* k = args.pos.empty() ? nullptr : args.pos[0].OnlyStr();
              k != nullptr && o.exact && widened == nullptr) {
            r = args.pos.size() > 1 ? args.pos[1] : NoneValue();
            for (size_t i = 0; i < o.keys.size(); ++i) {
              if (o.keys[i] == *k) r = o.items[i];
            }
          }
          if (name != "get") Mutate(Obj(id), added);
          out = ValueJoin(out, r);
        } else if (name == "items") {
          if (o.exact && widened == nullptr) {
            std::vector<Value> pairs;
            for (size_t i = 0; i < o.keys.size(); ++i) {
              pairs.push_back(Obj(MakeList(heap_, {Str(o.keys[i]), o.items[i]}, true)));
            }
            out = ValueJoin(out, Obj(MakeList(heap_, std::move(pairs))));
          } else {
            out = ValueJoin(out, Obj(MakeListOf(heap_, Obj(MakeList(heap_, {keys, values}, true)))));
          }
        } else if (name == "keys") {
          out = ValueJoin(out, Obj(MakeListOf(heap_, keys)));
        } else if (name == "values") {
          out = ValueJoin(out, Obj(MakeListOf(heap_, values)));
        } else if (name == "copy") {
          out = ValueJoin(out, Obj(id));
        } else if (name == "popitem") {
          Mutate(Obj(id), Value{});
          out = ValueJoin(out, Obj(MakeList(heap_, {keys, values}, true)));
        } else if (name == "update") {
          // Keys and values may come from a dict, from (key, value) pairs or from keywords:
          // whatever a later lookup of this dict can give back.
          const Value elements = Iterate(added).element;
          Value extra = ValueJoin(ValueJoin(added, elements), Iterate(elements).element);
          for (uint32_t aid : added.objs) {
            const HeapObj a = heap_.Get(aid);
            if (a.kind != ObjKind::kDict) continue;
            for (const Value& v : a.items) extra = ValueJoin(extra, v);
            if (const Value* w = heap_.Widened(aid)) extra = ValueJoin(extra, *w);
          }
          Mutate(Obj(id), extra);
          out = ValueJoin(out, NoneValue());
        } else {  // clear
          Mutate(Obj(id), Value{});
          out = ValueJoin(out, NoneValue());
        }
        break;
      }
      case ObjKind::kLoop:
        if (name == "cycle") {
          for (const Value& a : args.pos) out = ValueJoin(out, a);
          if (args.star.has_value()) out = ValueJoin(out, Iterate(*args.star).element);
          if (out.empty()) out = Undef();
        } else {
          out = ValueJoin(out, AnyBool());
        }
        break;
      case ObjKind::kCycler:
        out = ValueJoin(out, name == "next" ? o.items[0] : NoneValue());
        break;
      default:
        out = ValueJoin(out, Undef());
        break;
    }
  }
  if (out.empty()) out = Undef();
  return out;
}

// ---- filters and tests ------------------------------------------------------------------

namespace {
// A filter's argument by position (after the value) or keyword.
const Value* Arg(const Args& a, size_t pos, std::string_view name) {
  if (pos < a.pos.size()) return &a.pos[pos];
  return a.Kw(name);
}
}  // namespace

Value Evaluator::Filter(const std::string& name, const Value& input, const Args& args,
                        uint32_t node) {
  const Node& n = tree_.nodes[node];
  const uint32_t at = n.kind == NodeKind::kFilter ? static_cast<uint32_t>(n.integer) : n.offset;
  if (!IsBuiltinFilter(name)) {
    Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "unknown_filter",
           absl::StrCat("the filter '", name, "', which Jinja does not have, in ", Path(node)));
    return Undef();
  }
  // *args and **kwargs of unknown content: what they may hold joins every argument.
  Args a = args;
  if (a.star.has_value()) {
    const Elements e = Iterate(*a.star);
    if (e.exact) {
      a.pos.insert(a.pos.end(), e.items.begin(), e.items.end());
    } else {
      for (size_t i = a.pos.size(); i < 4; ++i) a.pos.push_back(e.element);
    }
  }
  if (a.starstar.has_value()) {
    const Value any = ValueJoin(Iterate(*a.starstar).element, Index(*a.starstar, AnyInt()));
    for (const char* k : {"attribute", "d", "default", "start", "name", "sep"}) {
      if (a.Kw(k) == nullptr) a.kw.emplace_back(k, ValueJoin(any, Json()));
    }
  }
  const Elements items = [&]() {
    static const std::set<std::string> kIterating = {
        "batch", "first", "groupby", "join", "last", "list", "map", "max", "min", "random",
        "reject", "rejectattr", "reverse", "select", "selectattr", "slice", "sort", "sum",
        "unique", "length", "count", "dictsort", "items"};
    return kIterating.count(name) > 0 ? Iterate(input) : Elements{};
  }();
  const auto list_of = [&](const Value& element) { return Obj(MakeListOf(heap_, element)); };
  const Value* attribute = nullptr;
  if (name == "map") attribute = a.Kw("attribute");
  if (name == "groupby" || name == "sum") attribute = Arg(a, 0, "attribute");
  if (name == "sort") attribute = Arg(a, 2, "attribute");
  if (name == "unique" || name == "min" || name == "max" || name == "join") {
    attribute = Arg(a, 1, "attribute");
  }
  if (name == "selectattr" || name == "rejectattr") attribute = a.pos.empty() ? nullptr : &a.pos[0];
  Value mapped = items.element;
  std::vector<Value> mapped_exact = items.items;
  if (attribute != nullptr && !(attribute->bits == kNone && attribute->strs.empty() &&
                                attribute->ints.empty() && attribute->objs.empty())) {
    mapped = AttrGetter(items.element, *attribute, node);
    for (Value& x : mapped_exact) x = AttrGetter(x, *attribute, node);
  }
  if (name == "attr") {
    const Value* attr = Arg(a, 0, "name");
    return Access(input, attr == nullptr ? Undef() : *attr, Via::kAttrFilter, node, false);
  }
  if (name == "map") {
    if (attribute != nullptr) {
      const Value* d = a.Kw("default");
      Value el = d != nullptr ? ValueJoin(mapped, *d) : mapped;
      if (items.exact && d == nullptr) return Obj(MakeList(heap_, std::move(mapped_exact)));
      return list_of(el);
    }
    if (a.pos.empty()) return list_of(Undef());
    Args rest = a;
    rest.pos.erase(rest.pos.begin());
    Value result;
    for (const std::string& f : a.pos[0].strs) {
      if (items.exact) {
        std::vector<Value> r;
        for (const Value& x : items.items) r.push_back(Filter(f, x, rest, node));
        result = ValueJoin(result, Obj(MakeList(heap_, std::move(r))));
      } else {
        result = ValueJoin(result, list_of(Filter(f, items.element, rest, node)));
      }
    }
    Value other = a.pos[0];
    other.strs.clear();
    if (other.MayBeStr()) {  // a filter named by a string not folded: any filter, attr too
      Access(items.element, Unknown(), Via::kAttrFilter, node, false);
      result = ValueJoin(result, list_of(ValueJoin(Json(), Opaque())));
    }
    return result.empty() ? list_of(Undef()) : result;
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const size_t test_at = name.size() > 6 ? 1 : 0;  // selectattr(attr, test, ...)
    if (test_at < a.pos.size()) {
      Args rest = a;
      rest.pos.erase(rest.pos.begin(), rest.pos.begin() + static_cast<long>(test_at) + 1);
      for (const std::string& t : a.pos[test_at].strs) Test(t, mapped, rest, node);
      Value other = a.pos[test_at];
      other.strs.clear();
      if (other.MayBeStr()) {
        Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "unknown_test",
               absl::StrCat("a test named by a string not folded to a constant in ", Path(node)));
      }
    }
    return list_of(items.element);
  }
  if (name == "first" || name == "last" || name == "random") {
    if (items.exact) {
      if (items.items.empty()) return Undef();
      if (name == "first") return items.items.front();
      if (name == "last") return items.items.back();
      return items.element;
    }
    return ValueJoin(items.element, Undef());
  }
  if (name == "list") {
    if (items.exact) return Obj(MakeList(heap_, items.items));
    return list_of(items.element);
  }
  if (name == "reverse") {
    Value out;
    for (const std::string& s : input.strs) {
      std::vector<std::string> cps = CodePoints(s);
      std::reverse(cps.begin(), cps.end());
      std::string r;
      for (const std::string& c : cps) r += c;
      out = ValueJoin(out, Str(std::move(r)));
    }
    if (input.bits & kAnyStr) out = ValueJoin(out, AnyStr(input.origin));
    Value rest = input;
    rest.strs.clear();
    rest.bits &= ~kAnyStr;
    if (!rest.empty()) {
      const Elements e = Iterate(rest);
      if (e.exact) {
        std::vector<Value> r(e.items.rbegin(), e.items.rend());
        out = ValueJoin(out, Obj(MakeList(heap_, std::move(r))));
      } else {
        out = ValueJoin(out, list_of(e.element));
      }
      if (rest.bits & kJson) out = ValueJoin(out, Json());
    }
    return out.empty() ? Undef() : out;
  }
  if (name == "join") {
    const Value* d = Arg(a, 0, "d");
    const Value sep = d == nullptr ? Str("") : ToStr(*d);
    if (items.exact) {
      Value acc = Str("");
      for (size_t i = 0; i < mapped_exact.size(); ++i) {
        if (i > 0) acc = Concat(acc, sep);
        acc = Concat(acc, mapped_exact[i]);
      }
      return acc;
    }
    const Value el = ToStr(mapped);
    return AnyStr(Unfolded({&el, &sep}));
  }
  if (name == "length" || name == "count" || name == "wordcount") {
    if (items.exact && name != "wordcount") return Int(static_cast<int64_t>(items.items.size()));
    return AnyInt();
  }
  if (name == "sum") {
    const Value* start = Arg(a, 1, "start");
    Value out = ValueJoin(BinOp(Tok::kAdd, mapped, mapped), start != nullptr ? *start : Int(0));
    if (start != nullptr) out = ValueJoin(out, BinOp(Tok::kAdd, *start, mapped));
    return out;
  }
  if (name == "max" || name == "min") return ValueJoin(items.element, Undef());
  if (name == "sort" || name == "unique") return list_of(items.element);
  if (name == "batch" || name == "slice") {
    const Value* fill = Arg(a, 1, "fill_with");
    Value el = items.element;
    if (fill != nullptr) el = ValueJoin(el, *fill);
    return list_of(list_of(el));
  }
  if (name == "groupby") {
    HeapObj g;
    g.kind = ObjKind::kGroup;
    const Value* d = Arg(a, 1, "default");
    g.items = {d != nullptr ? ValueJoin(mapped, *d) : mapped, list_of(items.element)};
    return list_of(Obj(heap_.Intern(std::move(g))));
  }
  if (name == "dictsort" || name == "items") {
    Value keys, values;
    for (uint32_t id : input.objs) {
      const HeapObj o = heap_.Get(id);
      if (o.kind != ObjKind::kDict) continue;
      if (o.exact) {
        for (const std::string& k : o.keys) keys = ValueJoin(keys, Str(k));
        for (const Value& v : o.items) values = ValueJoin(values, v);
      } else if (o.items.size() == 2) {
        keys = ValueJoin(keys, o.items[0]);
        values = ValueJoin(values, o.items[1]);
      }
      if (const Value* w = heap_.Widened(id)) {
        keys = ValueJoin(keys, *w);
        values = ValueJoin(values, *w);
      }
    }
    if (input.bits & (kJson | kUnknown | kOpaque)) {
      keys = ValueJoin(keys, AnyStr(Origin::kData));
      values = ValueJoin(values, Json());
    }
    if (input.objs.size() == 1 && input.bits == 0) {
      const HeapObj o = heap_.Get(input.objs[0]);
      if (o.kind == ObjKind::kDict && o.exact && heap_.Widened(input.objs[0]) == nullptr &&
          name == "items") {
        std::vector<Value> pairs;
        for (size_t i = 0; i < o.keys.size(); ++i) {
          pairs.push_back(Obj(MakeList(heap_, {Str(o.keys[i]), o.items[i]}, true)));
        }
        return Obj(MakeList(heap_, std::move(pairs)));
      }
    }
    return list_of(Obj(MakeList(heap_, {keys, values}, true)));
  }
  if (name == "default" || name == "d") {
    const Value* d = Arg(a, 0, "default_value");
    const Value* boolean = Arg(a, 1, "boolean");
    const Value def = d == nullptr ? Str("") : *d;
    Value out = input;
    const bool may_undefined = (input.bits & kUndefined) != 0;
    out.bits &= ~kUndefined;
    if (may_undefined || (boolean != nullptr && Truth(*boolean) != false)) {
      out = ValueJoin(out, def);
    }
    return out.empty() ? def : out;
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    return StrOp(ToStr(input), name, Args{}, node);
  }
  if (name == "trim") {
    Args s;
    if (const Value* chars = Arg(a, 0, "chars")) s.pos.push_back(*chars);
    return StrOp(ToStr(input), "strip", s, node);
  }
  if (name == "replace") {
    Args s;
    for (size_t i = 0; i < 3; ++i) {
      const Value* x = Arg(a, i, i == 0 ? "old" : i == 1 ? "new" : "count");
      if (x == nullptr) break;
      if (i == 2 && x->bits == kNone) break;
      s.pos.push_back(*x);
    }
    return StrOp(ToStr(input), "replace", s, node);
  }
  if (name == "center") {
    Args s;
    const Value* w = Arg(a, 0, "width");
    s.pos.push_back(w != nullptr ? *w : Int(80));
    return StrOp(ToStr(input), "center", s, node);
  }
  if (name == "format") {
    Value tuple;
    if (!a.kw.empty()) {
      std::vector<std::string> k;
      std::vector<Value> v;
      for (const auto& [key, val] : a.kw) {
        k.push_back(key);
        v.push_back(val);
      }
      tuple = Obj(MakeDict(heap_, std::move(k), std::move(v)));
      const Value s = ToStr(input);
      return AnyStr(Unfolded({&s, &tuple}));
    }
    tuple = Obj(MakeList(heap_, a.pos, /*tuple=*/true));
    return BinOp(Tok::kMod, ToStr(input), tuple);
  }
  if (name == "string" || name == "safe") return ToStr(input);
  if (name == "e" || name == "escape" || name == "forceescape") {
    const Value s = ToStr(input);
    return MapStrings(s, Unfolded({&s}), [](const std::string& x) -> std::optional<std::string> {
      std::string r;
      for (char c : x) {
        switch (c) {
          case '&':
            r += "&amp;";
            break;
          case '<':
            r += "&lt;";
            break;
          case '>':
            r += "&gt;";
            break;
          case '\'':
            r += "&#39;";
            break;
          case '"':
            r += "&#34;";
            break;
          default:
            r += c;
        }
      }
      return r;
    });
  }
  if (name == "int") {
    Value out;
    for (const std::string& s : input.strs) {
      const std::string t = StripChars(s, "", true, true, true);
      if (!t.empty() && t.size() < 18 &&
          std::all_of(t.begin() + (t[0] == '-' || t[0] == '+' ? 1 : 0), t.end(),
                      [](char c) { return c >= '0' && c <= '9'; }) &&
          t != "-" && t != "+") {
        out = ValueJoin(out, Int(std::stoll(t)));
      } else {
        out = ValueJoin(out, AnyInt());
      }
    }
    for (int64_t i : input.ints) out = ValueJoin(out, Int(i));
    if (input.bits & kTrue) out = ValueJoin(out, Int(1));
    if (input.bits & kFalse) out = ValueJoin(out, Int(0));
    if ((input.bits & ~(kTrue | kFalse)) || !input.objs.empty()) out = ValueJoin(out, AnyInt());
    return out.empty() ? Int(0) : out;
  }
  if (name == "float" || name == "round" || name == "abs") {
    if (name == "abs" && !input.ints.empty() && input.bits == 0 && input.objs.empty() &&
        input.strs.empty()) {
      Value out;
      for (int64_t i : input.ints) out = ValueJoin(out, i == INT64_MIN ? AnyInt() : Int(i < 0 ? -i : i));
      return out;
    }
    return ValueJoin(AnyInt(), Bits(kFloat));
  }
  // tojson, pprint, indent, wordwrap, truncate, striptags, urlencode, urlize, xmlattr,
  // filesizeformat: text the evaluation does not fold.
  const Value s = ToStr(input);
  return AnyStr(name == "tojson" || name == "pprint" ? Unfolded({&s}) : Unfolded({&s}));
}

Value Evaluator::Test(const std::string& name, const Value& input, const Args& args,
                      uint32_t node) {
  (void)args;
  if (!IsBuiltinTest(name)) {
    const Node& n = tree_.nodes[node];
    const uint32_t at = n.kind == NodeKind::kTest ? static_cast<uint32_t>(n.integer) : n.offset;
    Report(at, kPlainEnv | kSandboxEnv, Severity::kSuspicious, "unknown_test",
           absl::StrCat("the test '", name, "', which Jinja does not have, in ", Path(node)));
    return AnyBool();
  }
  if (name == "defined" || name == "undefined") {
    const bool may_undef = (input.bits & kUndefined) != 0;
    Value rest = input;
    rest.bits &= ~kUndefined;
    const bool may_def = !rest.empty();
    if (may_undef && !may_def) return Bool(name == "undefined");
    if (may_def && !may_undef) return Bool(name == "defined");
    return AnyBool();
  }
  if (name == "none") {
    if (input.bits == kNone && input.strs.empty() && input.ints.empty() && input.objs.empty()) {
      return Bool(true);
    }
    if (!(input.bits & (kNone | kJson | kUnknown | kOpaque))) return Bool(false);
  }
  return AnyBool();
}

}  // namespace ckptscan::jinja
