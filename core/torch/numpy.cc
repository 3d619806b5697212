#include "core/torch/numpy.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"

namespace ckptscan::torch {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kMaxDims = 64;  // numpy's NPY_MAXDIMS
// Python's tokenizer refuses brackets nested deeper than this ("too many nested parentheses",
// MAXLEVEL in Parser/tokenizer.h), so ast.literal_eval never returns anything deeper.
constexpr size_t kMaxNesting = 200;
// numpy keeps a dtype's item size in a C int: a descr whose size does not fit is refused.
constexpr uint64_t kMaxItemSize = INT32_MAX;

// A value of the header's Python literal, as ast.literal_eval builds it: the kinds numpy's
// header can hold. Nodes live in one vector; a container lists its children's indices (a
// dict: key, value, key, value, ...).
struct Lit {
  enum class Kind : uint8_t { kStr, kInt, kBool, kTuple, kList, kDict };
  Kind kind = Kind::kStr;
  std::string str;
  int64_t num = 0;
  bool flag = false;
  std::vector<uint32_t> items;
};

// A parser of the Python literal subset a header uses, without recursion: strings without
// escapes, non-negative decimal integers, True and False, tuples, lists and dicts, with what
// numpy/lib/format.py _read_array_header accepts of it (ast.literal_eval, numpy 1.24 and 2.2
// alike): any Python whitespace, comments, backslash line joins, a parenthesised value that is
// no tuple ("(3)" is 3), a key given twice (the last one counts) and, in versions 1.0 and 2.0
// (_filter_header, for Python 2's files), an 'L' token after a number ("(520L,)"). Anything
// else is an error, never a guess.
class LiteralParser {
 public:
  LiteralParser(std::string_view s, bool python2_longs) : s_(s), python2_longs_(python2_longs) {}

  // The root's index in `nodes`.
  absl::StatusOr<uint32_t> Parse(std::vector<Lit>* nodes) {
    nodes_ = nodes;
    struct Open {
      uint32_t node;
      char closer;
      bool comma = false;  // a tuple: whether a comma was seen ("(x)" is x)
    };
    std::vector<Open> stack;
    while (true) {
      // A value is expected here.
      Space();
      uint32_t done;
      const char c = Peek();
      if (c == '(' || c == '[' || c == '{') {
        if (stack.size() >= kMaxNesting) return Bad("too many nested brackets");
        const Lit::Kind kind = c == '(' ? Lit::Kind::kTuple
                               : c == '[' ? Lit::Kind::kList
                                          : Lit::Kind::kDict;
        stack.push_back(Open{New(kind), c == '(' ? ')' : c == '[' ? ']' : '}'});
        ++i_;
        Space();
        if (Peek() != stack.back().closer) continue;
        ++i_;  // an empty container: () is a tuple
        done = stack.back().node;
        stack.pop_back();
      } else {
        CKPT_ASSIGN_OR_RETURN(done, Scalar());
      }
      // After a value: attach it, then a separator or the closers of finished containers.
      while (true) {
        if (stack.empty()) {
          Space();
          if (i_ != s_.size()) return Bad("text after the value");
          return done;
        }
        Open& top = stack.back();
        Lit& parent = (*nodes_)[top.node];
        parent.items.push_back(done);
        Space();
        if (parent.kind == Lit::Kind::kDict && parent.items.size() % 2 == 1) {
          CKPT_RETURN_IF_ERROR(Expect(':'));
          break;  // the value follows
        }
        if (Peek() == ',') {
          ++i_;
          top.comma = true;
          Space();
          if (Peek() != top.closer) break;  // the next element follows
        } else if (Peek() != top.closer) {
          return Bad(absl::StrFormat("expected ',' or '%c'", top.closer));
        }
        ++i_;
        done = top.node;
        if (parent.kind == Lit::Kind::kTuple && !top.comma && parent.items.size() == 1) {
          done = parent.items[0];  // parentheses around one value make no tuple
        }
        stack.pop_back();
      }
    }
  }

 private:
  absl::Status Bad(std::string why) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("npy header: %s at character %d", base::AbslView(why), i_));
  }
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  uint32_t New(Lit::Kind kind) {
    nodes_->emplace_back();
    nodes_->back().kind = kind;
    return static_cast<uint32_t>(nodes_->size() - 1);
  }
  // Whitespace between tokens, as Python's tokenizer skips it inside brackets: blanks, line
  // ends (implicit joining), a backslash before a line end, and '#' comments to the line end.
  void Space() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') ++i_;
      } else if (c == '\\' && i_ + 1 < s_.size() && (s_[i_ + 1] == '\n' || s_[i_ + 1] == '\r')) {
        i_ += 2;
      } else {
        return;
      }
    }
  }
  static bool IdentifierChar(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           static_cast<unsigned char>(c) >= 0x80;
  }
  absl::Status Expect(char c) {
    if (Peek() != c) return Bad(absl::StrFormat("expected '%c'", c));
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> Scalar() {
    const char c = Peek();
    if (c == '\'' || c == '"') {
      size_t end = s_.find(c, i_ + 1);
      if (end == std::string_view::npos) return Bad("unterminated string");
      std::string out(s_.substr(i_ + 1, end - i_ - 1));
      if (out.find('\\') != std::string::npos) return Bad("escapes in a string");
      if (out.find('\n') != std::string::npos) return Bad("a line end in a string");
      i_ = end + 1;
      const uint32_t n = New(Lit::Kind::kStr);
      (*nodes_)[n].str = std::move(out);
      return n;
    }
    if (c >= '0' && c <= '9') {
      const size_t start = i_;
      int64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (v > (INT64_MAX - 9) / 10) return Bad("a number too large");
        v = v * 10 + (Peek() - '0');
        ++i_;
      }
      if (i_ - start > 1 && s_[start] == '0' && v != 0) return Bad("a leading zero");
      if (IdentifierChar(Peek()) || Peek() == '.') {
        const bool l_token = python2_longs_ && Peek() == 'L' &&
                             !IdentifierChar(i_ + 1 < s_.size() ? s_[i_ + 1] : ' ');
        if (!l_token) return Bad("a number numpy's header cannot hold");
        ++i_;  // _filter_header drops a NAME token 'L' that follows a NUMBER
      }
      const uint32_t n = New(Lit::Kind::kInt);
      (*nodes_)[n].num = v;
      return n;
    }
    for (const bool b : {true, false}) {
      const std::string_view word = b ? "True" : "False";
      if (s_.substr(i_, word.size()) == word &&
          !IdentifierChar(i_ + word.size() < s_.size() ? s_[i_ + word.size()] : ' ')) {
        i_ += word.size();
        const uint32_t n = New(Lit::Kind::kBool);
        (*nodes_)[n].flag = b;
        return n;
      }
    }
    return Bad("expected a string, a number, True, False or a bracket");
  }

  std::string_view s_;
  bool python2_longs_;
  std::vector<Lit>* nodes_ = nullptr;
  size_t i_ = 0;
};

struct Header {
  uint32_t descr = 0;  // node index
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

absl::Status BadHeader(std::string why) {
  return absl::InvalidArgumentError(absl::StrCat("npy header: ", why));
}

// The checks of _read_array_header on the evaluated literal: a dict of exactly the three keys,
// a tuple of ints for the shape, a bool for fortran_order.
absl::StatusOr<Header> HeaderOf(const std::vector<Lit>& nodes, uint32_t root) {
  const Lit& d = nodes[root];
  if (d.kind != Lit::Kind::kDict) return BadHeader("not a dict");
  Header h;
  bool seen[3] = {false, false, false};
  for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
    const Lit& key = nodes[d.items[k]];
    const Lit& value = nodes[d.items[k + 1]];
    const int which = key.kind != Lit::Kind::kStr     ? -1
                      : key.str == "descr"           ? 0
                      : key.str == "fortran_order"   ? 1
                      : key.str == "shape"           ? 2
                                                     : -1;
    if (which < 0) {
      return BadHeader(key.kind == Lit::Kind::kStr
                           ? absl::StrFormat("unexpected key '%s'", base::AbslView(key.str))
                           : std::string("a key that is not a string"));
    }
    seen[which] = true;  // a dict display keeps the last value of a key given twice
    if (which == 0) {
      h.descr = d.items[k + 1];
    } else if (which == 1) {
      if (value.kind != Lit::Kind::kBool) return BadHeader("fortran_order is not True or False");
      h.fortran_order = value.flag;
    } else {
      if (value.kind != Lit::Kind::kTuple) return BadHeader("the shape is not a tuple");
      if (value.items.size() > kMaxDims) return BadHeader("too many dimensions");
      h.shape.clear();
      for (uint32_t i : value.items) {
        if (nodes[i].kind != Lit::Kind::kInt) return BadHeader("a dimension is not an integer");
        h.shape.push_back(nodes[i].num);
      }
    }
  }
  if (!seen[0] || !seen[1] || !seen[2]) return BadHeader("a key is missing");
  return h;
}

// What numpy.dtype makes of a descr (numpy/lib/format.py descr_to_dtype), as far as the
// reading needs it: whether it holds objects (then np.load unpickles the data), its item size,
// and, for a plain numeric descr, the tensor dtype.
struct Descr {
  bool object = false;
  uint64_t itemsize = 0;
  const DTypeInfo* dtype = nullptr;  // a plain numeric string with a tensor dtype
  bool big_endian = false;
  bool pad_type = false;  // dt.type is numpy.void and dt.names is None: 'V<n>' or a subarray
  bool fields = false;    // a structured dtype (names, possibly none)
  char flexible = 0;      // 'S', 'U' or 'V' for those strings, whose size numpy may set
  std::string what;       // for messages: "byte strings", "a structured dtype", ...
};

absl::Status Unsupported(std::string why) { return absl::UnimplementedError(why); }

bool ParseSize(std::string_view digits, uint64_t* out) {
  if (digits.empty()) return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || v > (kMaxItemSize - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// numpy.dtype(STRING) for the strings dtype.str and dtype.descr write: a byte order, a kind and
// a size ("<f4", "|S3", "<U8", "|V16", "<M8[ns]", "|O"). Any other string numpy may accept is
// refused as unsupported: the reading never guesses what it makes.
absl::StatusOr<Descr> DescrOfString(std::string_view s) {
  Descr d;
  std::string_view code = s;
  if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) {
    d.big_endian = code[0] == '>';
    code.remove_prefix(1);
  }
  if (s == "object" || s == "object_" || code == "O" || code == "O4" || code == "O8") {
    d.object = true;
    d.itemsize = 8;
    d.what = "objects";
    return d;
  }
  struct Fixed {
    std::string_view code, tensor, what;
    uint64_t size;
  };
  static constexpr Fixed kFixed[] = {
      {"f2", "float16", "", 2},    {"f4", "float32", "", 4},     {"f8", "float64", "", 8},
      {"i1", "int8", "", 1},       {"i2", "int16", "", 2},       {"i4", "int32", "", 4},
      {"i8", "int64", "", 8},      {"u1", "uint8", "", 1},       {"u2", "uint16", "", 2},
      {"u4", "uint32", "", 4},     {"u8", "uint64", "", 8},      {"b1", "bool", "", 1},
      {"c8", "complex64", "", 8},  {"c16", "complex128", "", 16},
      {"f16", "", "long double", 16}, {"c32", "", "complex long double", 32},
  };
  for (const Fixed& f : kFixed) {
    if (f.code != code) continue;
    d.itemsize = f.size;
    if (!f.tensor.empty()) d.dtype = DTypeFromName(f.tensor);
    d.what = f.what.empty() ? std::string(f.tensor) : std::string(f.what);
    return d;
  }
  if (!code.empty() && (code[0] == 'S' || code[0] == 'U' || code[0] == 'V')) {
    uint64_t n = 0;
    if (!ParseSize(code.substr(1), &n) || (code[0] == 'U' && n > kMaxItemSize / 4)) {
      return Unsupported(absl::StrFormat("npy: dtype '%s' is not supported", base::AbslView(s)));
    }
    d.itemsize = code[0] == 'U' ? 4 * n : n;
    d.pad_type = code[0] == 'V';
    d.flexible = code[0];
    d.what = code[0] == 'S' ? "byte strings" : code[0] == 'U' ? "unicode strings" : "raw bytes";
    return d;
  }
  if (code.size() >= 2 && (code.substr(0, 2) == "M8" || code.substr(0, 2) == "m8")) {
    std::string_view unit = code.substr(2);
    if (!unit.empty()) {
      if (unit.front() != '[' || unit.back() != ']') {
        return Unsupported(absl::StrFormat("npy: dtype '%s' is not supported", base::AbslView(s)));
      }
      unit = unit.substr(1, unit.size() - 2);
      size_t digits = 0;
      while (digits < unit.size() && unit[digits] >= '0' && unit[digits] <= '9') ++digits;
      static constexpr std::string_view kUnits[] = {"Y",  "M",  "W",  "D",  "h",  "m", "s",
                                                    "ms", "us", "ns", "ps", "fs", "as"};
      const std::string_view u = unit.substr(digits);
      if (std::find(std::begin(kUnits), std::end(kUnits), u) == std::end(kUnits) ||
          (digits > 0 && unit[0] == '0') || digits > 9) {
        return Unsupported(absl::StrFormat("npy: dtype '%s' is not supported", base::AbslView(s)));
      }
    }
    d.itemsize = 8;
    d.what = code[0] == 'M' ? "datetimes" : "timedeltas";
    return d;
  }
  return Unsupported(absl::StrFormat("npy: dtype '%s' is not supported", base::AbslView(s)));
}

// numpy.dtype((dt, shape)), as numpy 1.24 and 2.2 both make it (checked by
// tests/differential/npy_descr_diff.py):
//   - an unsized dt (item size 0, no fields: 'S0', 'U0', 'V0') with an int n is the "generic
//     type tuple": dt sized to n characters or bytes (n = 0 leaves it as it is); with any
//     other shape numpy refuses it;
//   - a shape of () is dt itself, and so is an int 1 for numpy 1.x (numpy 2 makes a subarray of
//     one element: the same size; padding only if dt is);
//   - any other int, or a tuple or non-empty list of ints, makes a subarray: void, no names.
absl::StatusOr<Descr> Shaped(const Descr& d, const std::vector<Lit>& nodes, uint32_t shape) {
  const Lit& s = nodes[shape];
  std::vector<int64_t> dims;
  if (s.kind == Lit::Kind::kInt) {
    dims.push_back(s.num);
  } else if ((s.kind == Lit::Kind::kTuple || (s.kind == Lit::Kind::kList && !s.items.empty())) &&
             s.items.size() <= kMaxDims) {
    for (uint32_t i : s.items) {
      if (nodes[i].kind != Lit::Kind::kInt) {
        return Unsupported("npy: a subarray shape that is not integers");
      }
      dims.push_back(nodes[i].num);
    }
  } else {
    return Unsupported("npy: a subarray shape that is not integers");
  }
  const bool unsized = d.itemsize == 0 && !d.fields;
  if (unsized) {
    if (s.kind != Lit::Kind::kInt || d.flexible == 0) {
      return Unsupported("npy: a shape given to a dtype of no size");
    }
    Descr out = d;
    if (!base::CheckedMul<uint64_t>(static_cast<uint64_t>(s.num), d.flexible == 'U' ? 4 : 1,
                                    &out.itemsize) ||
        out.itemsize > kMaxItemSize) {
      return Unsupported("npy: a dtype too large");
    }
    return out;
  }
  if ((s.kind == Lit::Kind::kTuple && s.items.empty()) ||
      (s.kind == Lit::Kind::kInt && s.num == 1)) {
    return d;  // the size is dt's in every version, and so is whether it is padding
  }
  uint64_t count = 1;
  for (int64_t dim : dims) {
    if (!base::CheckedMul<uint64_t>(count, static_cast<uint64_t>(dim), &count) ||
        count > kMaxItemSize) {
      return Unsupported("npy: a subarray too large for a dtype");
    }
  }
  Descr out;
  if (!base::CheckedMul<uint64_t>(d.itemsize, count, &out.itemsize) ||
      out.itemsize > kMaxItemSize) {
    return Unsupported("npy: a dtype too large");
  }
  out.object = d.object;
  out.pad_type = true;
  out.what = "a subarray dtype";
  return out;
}

// descr_to_dtype, bottom-up over the literal's nodes (children have larger indices than their
// parents, so one pass from the last node to `root` sees every child first): no recursion.
absl::StatusOr<Descr> DescrOf(const std::vector<Lit>& nodes, uint32_t root) {
  std::vector<std::optional<absl::StatusOr<Descr>>> memo(nodes.size());
  // Which nodes are descrs: the root, a tuple's first item, a field's second item.
  std::vector<bool> is_descr(nodes.size(), false);
  is_descr[root] = true;
  for (size_t n = root; n < nodes.size(); ++n) {
    if (!is_descr[n]) continue;
    const Lit& l = nodes[n];
    if (l.kind == Lit::Kind::kTuple && !l.items.empty()) is_descr[l.items[0]] = true;
    if (l.kind == Lit::Kind::kList) {
      for (uint32_t f : l.items) {
        const Lit& field = nodes[f];
        if ((field.kind == Lit::Kind::kTuple || field.kind == Lit::Kind::kList) &&
            field.items.size() >= 2) {
          is_descr[field.items[1]] = true;
        }
      }
    }
  }
  for (size_t n = nodes.size(); n-- > root;) {
    if (!is_descr[n]) continue;
    const Lit& l = nodes[n];
    auto child = [&](uint32_t c) -> const absl::StatusOr<Descr>& { return *memo[c]; };
    if (l.kind == Lit::Kind::kStr) {
      memo[n] = DescrOfString(l.str);
    } else if (l.kind == Lit::Kind::kTuple) {
      // numpy.dtype((descr_to_dtype(descr[0]), descr[1])); numpy writes exactly two items.
      if (l.items.size() != 2) {
        memo[n] = Unsupported("npy: a subarray descr that is not (dtype, shape)");
        continue;
      }
      const absl::StatusOr<Descr>& base = child(l.items[0]);
      memo[n] = base.ok() ? Shaped(*base, nodes, l.items[1]) : base.status();
    } else if (l.kind == Lit::Kind::kList) {
      // A structured dtype: each field (name, descr) or (name, descr, shape); a field named ''
      // whose dtype is void without names (padding) only takes its bytes.
      Descr s;
      s.fields = true;
      s.what = "a structured dtype";
      absl::flat_hash_set<std::string_view> names;  // names and titles: numpy takes each once
      absl::Status bad;
      for (uint32_t f : l.items) {
        const Lit& field = nodes[f];
        if ((field.kind != Lit::Kind::kTuple && field.kind != Lit::Kind::kList) ||
            (field.items.size() != 2 && field.items.size() != 3)) {
          bad = Unsupported("npy: a structured field that is not (name, dtype[, shape])");
          break;
        }
        const absl::StatusOr<Descr>& fd = child(field.items[1]);
        if (!fd.ok()) {
          bad = fd.status();
          break;
        }
        absl::StatusOr<Descr> dt = field.items.size() == 3 ? Shaped(*fd, nodes, field.items[2]) : *fd;
        if (!dt.ok()) {
          bad = dt.status();
          break;
        }
        const Lit& name = nodes[field.items[0]];
        const bool pad = name.kind == Lit::Kind::kStr && name.str.empty() && dt->pad_type;
        if (!pad) {
          // A name, or (title, name): both strings, none used twice.
          std::vector<uint32_t> labels;
          if (name.kind == Lit::Kind::kStr) {
            labels.push_back(field.items[0]);
          } else if (name.kind == Lit::Kind::kTuple && name.items.size() == 2) {
            labels = name.items;
          }
          bool ok = !labels.empty();
          for (uint32_t label : labels) {
            ok = ok && nodes[label].kind == Lit::Kind::kStr &&
                 names.insert(nodes[label].str).second;
          }
          if (!ok) {
            bad = Unsupported("npy: a structured field name numpy does not take");
            break;
          }
          s.object = s.object || dt->object;
        }
        if (!base::CheckedAdd<uint64_t>(s.itemsize, dt->itemsize, &s.itemsize) ||
            s.itemsize > kMaxItemSize) {
          bad = Unsupported("npy: a dtype too large");
          break;
        }
      }
      if (bad.ok()) {
        memo[n] = s;
      } else {
        memo[n] = bad;
      }
    } else {
      memo[n] = Unsupported("npy: a descr that is not a string, a list or a tuple");
    }
  }
  return *memo[root];
}

// Whether a string anywhere under `root` is an object dtype ('|O', 'O8', 'object', ...).
bool NamesAnObject(const std::vector<Lit>& nodes, uint32_t root) {
  std::vector<uint32_t> todo = {root};
  while (!todo.empty()) {
    const Lit& l = nodes[todo.back()];
    todo.pop_back();
    if (l.kind == Lit::Kind::kStr) {
      absl::StatusOr<Descr> d = DescrOfString(l.str);
      if (d.ok() && d->object) return true;
    }
    todo.insert(todo.end(), l.items.begin(), l.items.end());
  }
  return false;
}

}  // namespace

bool IsNpy(std::string_view data) { return data.substr(0, kMagic.size()) == kMagic; }

void ReadNpy(std::string_view data, std::string_view member, std::string_view tensor_name,
             uint64_t base_offset, bool stored, const pickle::Vm& vm, FileFacts* out,
             uint64_t max_header_bytes) {
  auto error = [&](v1::ErrorCode code, std::string msg, uint64_t at) {
    out->errors.push_back(ContainerError(code, std::move(msg), member, at));
  };
  base::ByteReader r(data, base_offset);
  (void)r.Skip(std::min<uint64_t>(kMagic.size(), r.remaining()));
  absl::StatusOr<uint8_t> major = r.ReadU8();
  absl::StatusOr<uint8_t> minor = r.ReadU8();
  if (!major.ok() || !minor.ok())
    return error(v1::ERROR_CODE_MALFORMED, "npy: truncated magic", base_offset);
  if ((*major < 1 || *major > 3) || *minor != 0) {
    return error(v1::ERROR_CODE_UNSUPPORTED, absl::StrFormat("npy: version %d.%d", *major, *minor),
                 base_offset + 6);
  }
  absl::StatusOr<uint64_t> header_len = *major == 1 ? absl::StatusOr<uint64_t>(r.ReadU16LE())
                                                    : absl::StatusOr<uint64_t>(r.ReadU32LE());
  if (!header_len.ok())
    return error(v1::ERROR_CODE_MALFORMED, "npy: truncated header length", r.offset());
  if (*header_len > max_header_bytes) {
    std::string msg = absl::StrFormat("npy: header of %d bytes is over %d (max_npy_header_bytes)",
                                      *header_len, max_header_bytes);
    out->errors.push_back(
        StatusError(base::LimitError(msg, "max_npy_header_bytes", max_header_bytes),
                                      msg, member, r.offset()));
    return;
  }
  const uint64_t header_at = r.offset();
  absl::StatusOr<std::string_view> text = r.ReadBytes(*header_len);
  if (!text.ok()) return error(v1::ERROR_CODE_MALFORMED, "npy: truncated header", header_at);
  std::vector<Lit> nodes;
  absl::StatusOr<uint32_t> root =
      LiteralParser(*text, /*python2_longs=*/*major <= 2).Parse(&nodes);
  absl::StatusOr<Header> h = root.ok() ? HeaderOf(nodes, *root) : root.status();
  if (!h.ok()) {
    return error(ErrorCodeOf(h.status()), std::string(h.status().message()), header_at);
  }
  absl::StatusOr<Descr> descr = DescrOf(nodes, h->descr);
  if (!descr.ok()) {
    error(ErrorCodeOf(descr.status()), std::string(descr.status().message()), header_at);
    // A descr this reading cannot evaluate may still be one numpy takes, with an object in it:
    // then numpy unpickles the data, and what that pickle does is reported beside the error.
    if (!NamesAnObject(nodes, h->descr)) return;
  }
  if (!descr.ok() || descr->object) {
    // np.save(allow_pickle=True) writes the array with pickle.dump after the header.
    MemberFacts m;
    m.member = std::string(member);
    m.stream = vm.ScanStream(data.substr(r.offset() - base_offset), r.offset());
    out->members.push_back(std::move(m));
    return;
  }
  const DTypeInfo* dtype = descr->dtype;
  TensorFact t;
  t.name = std::string(tensor_name);
  t.dtype = dtype;
  t.shape = h->shape;
  t.stride.assign(t.shape.size(), 0);
  uint64_t numel = t.numel();
  uint64_t nbytes;
  if (numel == UINT64_MAX || !base::CheckedMul<uint64_t>(numel, descr->itemsize, &nbytes)) {
    return error(v1::ERROR_CODE_MALFORMED, "npy: the shape's size overflows", header_at);
  }
  // Element strides, row-major (C) or column-major (Fortran).
  int64_t step = 1;
  for (size_t k = 0; k < t.shape.size(); ++k) {
    size_t i = h->fortran_order ? k : t.shape.size() - 1 - k;
    t.stride[i] = step;
    step = t.shape[i] == 0 ? step : step * t.shape[i];
  }
  t.offset = header_at;
  if (descr->big_endian && descr->itemsize > 1) t.problem = "big-endian data";
  if (nbytes > r.remaining()) {
    return error(
        v1::ERROR_CODE_MALFORMED,
        absl::StrFormat("npy: array data needs %d bytes, %d remain", nbytes, r.remaining()),
        r.offset());
  }
  if (dtype == nullptr) {
    // Plain data numpy reads with np.fromfile (strings, long doubles, datetimes, structured
    // records without objects): no code runs, but no tensor holds it, so a conversion refuses
    // it by name.
    t.kind = TensorFact::Kind::kOther;
    t.problem = absl::StrFormat("a numpy array of %s, which no tensor dtype holds",
                                base::AbslView(descr->what));
  } else {
    StorageRef s;
    s.key = std::string(member);
    s.dtype = dtype;
    s.numel = numel;
    s.location = "cpu";
    s.pid_offset = header_at;
    t.storage = static_cast<int32_t>(out->storages.size());
    out->storages.push_back(std::move(s));
    out->storage_data.push_back(
        StorageData{std::string(member), std::string(member), r.offset(), nbytes, stored});
  }
  out->tensors.push_back(std::move(t));
  (void)r.Skip(nbytes);
  if (r.remaining() > 0) {
    out->anomalies.push_back(ContainerAnomaly{
        "trailing_data", std::string(member), r.offset(),
        absl::StrFormat("%d bytes after the array data, which numpy ignores", r.remaining())});
  }
}

}  // namespace ckptscan::torch
