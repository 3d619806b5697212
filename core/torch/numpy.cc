#include "core/torch/numpy.h"

#include <string>
#include <vector>

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
constexpr size_t kMaxDims = 64;         // numpy's NPY_MAXDIMS

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A parser for the dict literal numpy writes: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), } padded with spaces and ending in '\n'; and for what else
// numpy/lib/format.py _read_array_header accepts of it (ast.literal_eval, numpy 1.24 and 2.2
// alike): any Python whitespace, comments, backslash line joins, a key given twice (the last
// one counts) and, in versions 1.0 and 2.0 (_filter_header, for Python 2's files), an 'L'
// token after a number ("(520L,)").
class HeaderParser {
 public:
  HeaderParser(std::string_view s, bool python2_longs) : s_(s), python2_longs_(python2_longs) {}

  absl::StatusOr<Header> Parse() {
    Header h;
    bool seen[3] = {false, false, false};
    Space();
    CKPT_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      Space();
      if (Peek() == '}') {
        ++i_;
        break;
      }
      CKPT_ASSIGN_OR_RETURN(std::string key, String());
      Space();
      CKPT_RETURN_IF_ERROR(Expect(':'));
      Space();
      int which = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (which < 0) return Bad(absl::StrFormat("unexpected key '%s'", base::AbslView(key)));
      seen[which] = true;  // a dict display keeps the last value of a key given twice
      if (which == 0) {
        if (Peek() == '[') return absl::UnimplementedError("structured dtypes are not supported");
        CKPT_ASSIGN_OR_RETURN(h.descr, String());
      } else if (which == 1) {
        CKPT_ASSIGN_OR_RETURN(h.fortran_order, Bool());
      } else {
        CKPT_ASSIGN_OR_RETURN(h.shape, Shape());
      }
      Space();
      if (Peek() == ',') {
        ++i_;
        continue;
      }
      Space();
      CKPT_RETURN_IF_ERROR(Expect('}'));
      break;
    }
    Space();
    if (i_ != s_.size()) return Bad("text after the dict");
    if (!seen[0] || !seen[1] || !seen[2]) return Bad("a key is missing");
    return h;
  }

 private:
  absl::Status Bad(std::string why) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("npy header: %s at character %d", base::AbslView(why), i_));
  }
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  // Whitespace between tokens inside the braces, as Python's tokenizer skips it: blanks, line
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
  absl::StatusOr<std::string> String() {
    char q = Peek();
    if (q != '\'' && q != '"') return Bad("expected a string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) return Bad("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    if (out.find('\\') != std::string::npos) return Bad("escapes in a string");
    i_ = end + 1;
    return out;
  }
  absl::StatusOr<bool> Bool() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    return Bad("expected True or False");
  }
  absl::StatusOr<std::vector<int64_t>> Shape() {
    std::vector<int64_t> dims;
    CKPT_RETURN_IF_ERROR(Expect('('));
    while (true) {
      Space();
      if (Peek() == ')') {
        ++i_;
        return dims;
      }
      size_t start = i_;
      int64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (v > (INT64_MAX - 9) / 10) return Bad("dimension too large");
        v = v * 10 + (Peek() - '0');
        ++i_;
      }
      if (i_ == start) return Bad("expected a dimension");
      if (i_ - start > 1 && s_[start] == '0' && v != 0) return Bad("a leading zero");
      if (dims.size() >= kMaxDims) return Bad("too many dimensions");
      dims.push_back(v);
      Space();
      if (python2_longs_ && Peek() == 'L' &&
          !IdentifierChar(i_ + 1 < s_.size() ? s_[i_ + 1] : ' ')) {
        ++i_;  // _filter_header drops a NAME token 'L' that follows a NUMBER
        Space();
      }
      if (Peek() == ',') {
        ++i_;
        continue;
      }
      CKPT_RETURN_IF_ERROR(Expect(')'));
      if (dims.size() == 1) return Bad("a one-element tuple needs a comma");
      return dims;
    }
  }

  std::string_view s_;
  bool python2_longs_;
  size_t i_ = 0;
};

// descr ("<f4") → dtype; big-endian and non-numeric kinds are reported by the caller.
const DTypeInfo* DTypeFromDescr(std::string_view descr, bool* big_endian) {
  *big_endian = false;
  if (descr.size() < 2) return nullptr;
  char order = descr[0];
  if (order == '>') *big_endian = true;
  std::string_view code =
      (order == '<' || order == '>' || order == '|' || order == '=') ? descr.substr(1) : descr;
  struct Code {
    std::string_view code, name;
  };
  static constexpr Code kCodes[] = {
      {"f2", "float16"},   {"f4", "float32"},     {"f8", "float64"}, {"i1", "int8"},
      {"i2", "int16"},     {"i4", "int32"},       {"i8", "int64"},   {"u1", "uint8"},
      {"u2", "uint16"},    {"u4", "uint32"},      {"u8", "uint64"},  {"b1", "bool"},
      {"c8", "complex64"}, {"c16", "complex128"},
  };
  for (const Code& c : kCodes) {
    if (c.code == code) return DTypeFromName(c.name);
  }
  return nullptr;
}

// Whether numpy's descr_to_dtype makes an object dtype of `descr` (np.dtype of the string):
// "O" with a byte order and an item size of the pointer's (numpy accepts 4 and 8), or a name.
bool IsObjectDescr(std::string_view descr) {
  if (descr == "object" || descr == "object_") return true;
  if (!descr.empty() &&
      (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=')) {
    descr.remove_prefix(1);
  }
  return descr == "O" || descr == "O4" || descr == "O8";
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
  absl::StatusOr<Header> h = HeaderParser(*text, /*python2_longs=*/*major <= 2).Parse();
  if (!h.ok()) {
    return error(ErrorCodeOf(h.status()), std::string(h.status().message()), header_at);
  }
  if (IsObjectDescr(h->descr)) {
    // np.save(allow_pickle=True) writes the array with pickle.dump after the header.
    MemberFacts m;
    m.member = std::string(member);
    m.stream = vm.ScanStream(data.substr(r.offset() - base_offset), r.offset());
    out->members.push_back(std::move(m));
    return;
  }
  bool big_endian = false;
  const DTypeInfo* dtype = DTypeFromDescr(h->descr, &big_endian);
  if (dtype == nullptr) {
    return error(v1::ERROR_CODE_UNSUPPORTED,
                 absl::StrFormat("npy: dtype '%s' is not supported", base::AbslView(h->descr)),
                 header_at);
  }
  TensorFact t;
  t.name = std::string(tensor_name);
  t.dtype = dtype;
  t.shape = h->shape;
  t.stride.assign(t.shape.size(), 0);
  uint64_t numel = t.numel();
  uint64_t nbytes;
  if (numel == UINT64_MAX || !base::CheckedMul<uint64_t>(numel, dtype->size, &nbytes)) {
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
  if (big_endian && dtype->size > 1) t.problem = "big-endian data";
  if (nbytes > r.remaining()) {
    return error(
        v1::ERROR_CODE_MALFORMED,
        absl::StrFormat("npy: array data needs %d bytes, %d remain", nbytes, r.remaining()),
        r.offset());
  }
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
  out->tensors.push_back(std::move(t));
  (void)r.Skip(nbytes);
  if (r.remaining() > 0) {
    out->anomalies.push_back(ContainerAnomaly{
        "trailing_data", std::string(member), r.offset(),
        absl::StrFormat("%d bytes after the array data, which numpy ignores", r.remaining())});
  }
}

}  // namespace ckptscan::torch
