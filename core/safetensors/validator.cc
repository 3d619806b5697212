#include "core/safetensors/validator.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/byte_reader.h"
#include "base/checked.h"
#include "base/escape.h"
#include "base/json_cursor.h"
#include "base/json_text.h"
#include "base/limit_status.h"
#include "base/status_macros.h"
#include "base/strings.h"
#include "core/safetensors/text.h"
#include "nlohmann/json.hpp"

namespace ckptscan::safetensors {
namespace {

using base::AbslView;

// Names and strings from the file, safe to print: invisible and bidi characters escaped too.
std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}
using Json = nlohmann::json;

constexpr uint64_t kLengthBytes = 8;

absl::Status Malformed(uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("safetensors: %s (at byte offset %d)", AbslView(what), offset));
}

absl::Status TensorMalformed(std::string_view name, uint64_t offset, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("safetensors: tensor \"%s\": %s (at byte offset %d)", AbslView(Esc(name)),
                      AbslView(what), offset));
}

absl::Status OverLimit(std::string_view what, std::string_view field, uint64_t value, uint64_t max,
                       uint64_t offset) {
  return base::LimitError(
      absl::StrFormat(
          "safetensors: %s %d is over the limit %d (%s; at byte offset %d)",
          AbslView(what), value, max, AbslView(field), offset),
      field, max);
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return "[" + absl::StrJoin(shape, ",") + "]";
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

struct ParsedTensor {
  TensorLayout t;             // begin/end relative to the data buffer until the walk
  uint64_t entry_offset = 0;  // where its key ended in the file
};

// Consumes SAX events for the header object. Stops at the first error (returns false), leaving
// it in status(). Nesting is bounded by the state machine: nothing deeper than
// {name: {field: [number]}} is accepted.
class HeaderHandler final : public nlohmann::json_sax<Json> {
 public:
  HeaderHandler(const ValidatorLimits& limits, uint64_t header_start, const char* base,
                const char* const* cursor, Layout* layout, std::vector<ParsedTensor>* tensors)
      : limits_(limits),
        header_start_(header_start),
        base_(base),
        cursor_(cursor),
        layout_(layout),
        tensors_(tensors) {}

  const absl::Status& status() const { return status_; }
  bool done() const { return state_ == State::kDone; }

  bool null() override {
    if (state_ == State::kMetadataValue) {
      layout_->has_metadata = false;
      state_ = State::kTopKey;
      return true;
    }
    return Unexpected("null");
  }
  bool boolean(bool) override { return Unexpected("a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (InElements()) {
      return Fail(Element(v < 0 ? absl::StrFormat("is negative (%d)", v)
                                : std::string("is written with a minus sign (-0)")));
    }
    return Unexpected("a number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::kShapeElem) {
      if (pending_.t.shape.size() >= limits_.max_rank) {
        return Fail(
            OverLimit("rank", "max_rank", pending_.t.shape.size() + 1, limits_.max_rank, Pos()));
      }
      pending_.t.shape.push_back(v);
      return true;
    }
    if (state_ == State::kOffsetsElem) {
      if (offsets_seen_ >= 2) return Fail(Element("is extra: data_offsets must have 2 entries"));
      offsets_[offsets_seen_++] = v;
      return true;
    }
    return Unexpected("a number");
  }
  bool number_float(number_float_t, const string_t& token) override {
    if (InElements()) {
      const bool integral = token.find_first_of(".eE") == std::string::npos;
      // Two literal formats (absl checks a format at compile time; under clang a conditional
      // expression is not a constant format and does not compile).
      return Fail(Element(
          integral ? absl::StrFormat("is an integer too large for 64 bits (%s)", AbslView(token))
                   : absl::StrFormat("is not an integer (%s)", AbslView(token))));
    }
    return Unexpected("a number");
  }
  bool string(string_t& v) override {
    if (state_ == State::kMetaValue) {
      if (v.find('\0') != std::string::npos) {
        return Fail(Malformed(Pos(), absl::StrFormat("__metadata__ value of \"%s\" contains NUL",
                                                     AbslView(Esc(meta_key_)))));
      }
      layout_->metadata.emplace(std::move(meta_key_), std::move(v));
      state_ = State::kMetaKey;
      return true;
    }
    if (state_ == State::kDtypeValue) {
      std::optional<Dtype> d = ParseDtype(v);
      if (!d) {
        return Fail(TensorMalformed(pending_.t.name, Pos(),
                                    absl::StrFormat("unknown dtype \"%s\"", AbslView(Esc(v)))));
      }
      pending_.t.dtype = *d;
      state_ = State::kFieldKey;
      return true;
    }
    return Unexpected("a string");
  }
  bool binary(binary_t&) override { return Unexpected("binary data"); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::kExpectTop:
        state_ = State::kTopKey;
        return true;
      case State::kMetadataValue:
        layout_->has_metadata = true;
        state_ = State::kMetaKey;
        return true;
      case State::kTensorValue:
        state_ = State::kFieldKey;
        return true;
      default:
        return Unexpected("an object");
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::kShapeValue) {
      state_ = State::kShapeElem;
      return true;
    }
    if (state_ == State::kOffsetsValue) {
      offsets_seen_ = 0;
      state_ = State::kOffsetsElem;
      return true;
    }
    return Unexpected("an array");
  }
  bool end_array() override {
    if (state_ == State::kShapeElem) {
      state_ = State::kFieldKey;
      return true;
    }
    if (state_ == State::kOffsetsElem) {
      if (offsets_seen_ != 2) {
        return Fail(
            TensorMalformed(pending_.t.name, Pos(),
                            absl::StrFormat("data_offsets has %d entries, expected 2 [begin, end]",
                                            offsets_seen_)));
      }
      state_ = State::kFieldKey;
      return true;
    }
    return Unexpected("the end of an array");
  }
  bool end_object() override {
    switch (state_) {
      case State::kTopKey:
        state_ = State::kDone;
        return true;
      case State::kMetaKey:
        state_ = State::kTopKey;
        return true;
      case State::kFieldKey:
        return FinishTensor();
      default:
        return Unexpected("the end of an object");
    }
  }

  bool key(string_t& k) override {
    switch (state_) {
      case State::kTopKey: {
        if (!top_keys_.insert(k).second) {
          return Fail(Malformed(
              Pos(), absl::StrFormat("duplicate key \"%s\" in the header", AbslView(Esc(k)))));
        }
        if (k == "__metadata__") {
          state_ = State::kMetadataValue;
          return true;
        }
        if (std::optional<std::string> problem = internal::TensorNameProblem(k)) {
          return Fail(Malformed(Pos(), absl::StrFormat("tensor name \"%s\" %s", AbslView(Esc(k)),
                                                       AbslView(*problem))));
        }
        if (tensors_->size() >= limits_.max_tensors) {
          return Fail(OverLimit("tensor count", "max_safetensors_tensors", tensors_->size() + 1,
                                limits_.max_tensors, Pos()));
        }
        pending_ = ParsedTensor{};
        pending_.t.name = std::move(k);
        pending_.entry_offset = Pos();
        fields_ = 0;
        state_ = State::kTensorValue;
        return true;
      }
      case State::kMetaKey:
        if (layout_->metadata.contains(k)) {
          return Fail(Malformed(
              Pos(), absl::StrFormat("duplicate key \"%s\" in __metadata__", AbslView(Esc(k)))));
        }
        if (k.find('\0') != std::string::npos) {
          return Fail(Malformed(
              Pos(), absl::StrFormat("__metadata__ key \"%s\" contains NUL", AbslView(Esc(k)))));
        }
        if (layout_->metadata.size() >= limits_.max_metadata_entries) {
          return Fail(OverLimit("metadata entry count", "max_metadata_entries",
                                layout_->metadata.size() + 1, limits_.max_metadata_entries, Pos()));
        }
        meta_key_ = std::move(k);
        state_ = State::kMetaValue;
        return true;
      case State::kFieldKey: {
        unsigned bit;
        State next;
        if (k == "dtype") {
          bit = 1, next = State::kDtypeValue;
        } else if (k == "shape") {
          bit = 2, next = State::kShapeValue;
        } else if (k == "data_offsets") {
          bit = 4, next = State::kOffsetsValue;
        } else {
          return Fail(TensorMalformed(
              pending_.t.name, Pos(),
              absl::StrFormat("unknown field \"%s\" (allowed: dtype, shape, data_offsets)",
                              AbslView(Esc(k)))));
        }
        if (fields_ & bit) {
          return Fail(TensorMalformed(pending_.t.name, Pos(),
                                      absl::StrFormat("duplicate field \"%s\"", AbslView(k))));
        }
        fields_ |= bit;
        state_ = next;
        return true;
      }
      default:
        return Unexpected("a key");
    }
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "safetensors: header is not valid JSON (at byte offset %d): %s",
        header_start_ + (position > 0 ? position - 1 : 0), AbslView(Esc(ex.what())))));
  }

 private:
  enum class State {
    kExpectTop,
    kTopKey,
    kMetadataValue,
    kTensorValue,
    kMetaKey,
    kMetaValue,
    kFieldKey,
    kDtypeValue,
    kShapeValue,
    kOffsetsValue,
    kShapeElem,
    kOffsetsElem,
    kDone,
  };

  uint64_t Pos() const { return header_start_ + static_cast<uint64_t>(*cursor_ - base_); }
  bool InElements() const { return state_ == State::kShapeElem || state_ == State::kOffsetsElem; }

  bool Fail(absl::Status s) {
    status_ = std::move(s);
    return false;
  }

  absl::Status Element(std::string_view what) const {
    const bool shape = state_ == State::kShapeElem;
    const size_t index = shape ? pending_.t.shape.size() : offsets_seen_;
    return TensorMalformed(
        pending_.t.name, Pos(),
        absl::StrFormat("%s entry %d %s", shape ? "shape" : "data_offsets", index, AbslView(what)));
  }

  bool Unexpected(std::string_view found) {
    const std::string f(found);
    switch (state_) {
      case State::kExpectTop:
        return Fail(Malformed(Pos(), "header must be a JSON object, found " + f));
      case State::kMetadataValue:
        return Fail(
            Malformed(Pos(), "__metadata__ must be an object of strings (or null), found " + f));
      case State::kMetaValue:
        return Fail(Malformed(
            Pos(), absl::StrFormat("__metadata__ value of \"%s\" must be a string, found %s",
                                   AbslView(Esc(meta_key_)), AbslView(f))));
      case State::kTensorValue:
        return Fail(TensorMalformed(pending_.t.name, Pos(), "entry must be an object, found " + f));
      case State::kDtypeValue:
        return Fail(TensorMalformed(pending_.t.name, Pos(), "dtype must be a string, found " + f));
      case State::kShapeValue:
        return Fail(TensorMalformed(pending_.t.name, Pos(), "shape must be an array, found " + f));
      case State::kOffsetsValue:
        return Fail(
            TensorMalformed(pending_.t.name, Pos(), "data_offsets must be an array, found " + f));
      case State::kShapeElem:
      case State::kOffsetsElem:
        return Fail(Element("must be a non-negative integer, found " + f));
      default:
        return Fail(absl::InternalError(absl::StrFormat(
            "safetensors: unexpected JSON event (%s) at byte offset %d", AbslView(f), Pos())));
    }
  }

  bool FinishTensor() {
    const std::string& name = pending_.t.name;
    for (auto [bit, field] : {std::pair{1u, "dtype"}, {2u, "shape"}, {4u, "data_offsets"}}) {
      if (!(fields_ & bit)) {
        return Fail(TensorMalformed(name, Pos(), absl::StrFormat("missing field \"%s\"", field)));
      }
    }
    const uint64_t begin = offsets_[0], end = offsets_[1];
    if (end < begin) {
      return Fail(TensorMalformed(
          name, Pos(), absl::StrFormat("data_offsets [%d, %d] end before begin", begin, end)));
    }
    uint64_t numel = 1;
    for (uint64_t d : pending_.t.shape) {
      if (!base::CheckedMul(numel, d, &numel)) {
        return Fail(TensorMalformed(name, Pos(),
                                    absl::StrFormat("element count of shape %s overflows 64 bits",
                                                    ShapeString(pending_.t.shape))));
      }
    }
    const uint32_t bits = DtypeBits(pending_.t.dtype);
    uint64_t nbits;
    if (!base::CheckedMul(numel, uint64_t{bits}, &nbits)) {
      return Fail(TensorMalformed(name, Pos(),
                                  absl::StrFormat("bit size of %d %s elements overflows 64 bits",
                                                  numel, AbslView(DtypeName(pending_.t.dtype)))));
    }
    if (nbits % 8 != 0) {
      return Fail(TensorMalformed(
          name, Pos(),
          absl::StrFormat("%d %s elements (%d bits) are not a whole number of bytes", numel,
                          AbslView(DtypeName(pending_.t.dtype)), nbits)));
    }
    if (end - begin != nbits / 8) {
      return Fail(TensorMalformed(
          name, Pos(),
          absl::StrFormat("data_offsets [%d, %d] span %d bytes, but shape %s of %s needs %d", begin,
                          end, end - begin, ShapeString(pending_.t.shape),
                          AbslView(DtypeName(pending_.t.dtype)), nbits / 8)));
    }
    pending_.t.begin = begin;
    pending_.t.end = end;
    tensors_->push_back(std::move(pending_));
    state_ = State::kTopKey;
    return true;
  }

  const ValidatorLimits& limits_;
  const uint64_t header_start_;
  const char* const base_;
  const char* const* const cursor_;
  Layout* const layout_;
  std::vector<ParsedTensor>* const tensors_;

  State state_ = State::kExpectTop;
  absl::Status status_;
  std::unordered_set<std::string> top_keys_;
  std::string meta_key_;
  ParsedTensor pending_;
  unsigned fields_ = 0;
  uint64_t offsets_[2] = {0, 0};
  size_t offsets_seen_ = 0;
};

// Rules 5-7 of the reference: in data_offsets order, each tensor starts where the previous one
// ended, and the last one ends exactly at the end of the file.
absl::Status CheckCoverage(std::vector<ParsedTensor>& tensors, uint64_t data_start,
                           uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(), [](const ParsedTensor& a, const ParsedTensor& b) {
    return std::tie(a.t.begin, a.t.end, a.t.name) < std::tie(b.t.begin, b.t.end, b.t.name);
  });
  uint64_t start = 0;
  const ParsedTensor* previous = nullptr;
  for (const ParsedTensor& p : tensors) {
    if (p.t.begin < start) {
      return TensorMalformed(
          p.t.name, p.entry_offset,
          absl::StrFormat("data_offsets [%d, %d] overlap tensor \"%s\", which ends at %d",
                          p.t.begin, p.t.end, AbslView(Esc(previous->t.name)), start));
    }
    if (p.t.begin > start) {
      return TensorMalformed(
          p.t.name, p.entry_offset,
          absl::StrFormat("data_offsets [%d, %d] leave a gap: data bytes [%d, %d) (file offsets "
                          "[%d, %d)) belong to no tensor",
                          p.t.begin, p.t.end, start, p.t.begin, data_start + start,
                          data_start + p.t.begin));
    }
    if (p.t.end > data_size) {
      return TensorMalformed(
          p.t.name, p.entry_offset,
          absl::StrFormat("data_offsets [%d, %d] run past the end of the %d-byte data buffer "
                          "(file offset %d)",
                          p.t.begin, p.t.end, data_size, data_start + data_size));
    }
    start = p.t.end;
    previous = &p;
  }
  if (start != data_size) {
    return Malformed(
        data_start + start,
        absl::StrFormat("the data buffer has %d bytes after the last tensor that "
                        "belong to no tensor (file offsets [%d, %d))",
                        data_size - start, data_start + start, data_start + data_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Layout> ValidateHeader(std::string_view prefix, uint64_t file_size,
                                      const ValidatorLimits& limits) {
  if (prefix.size() > file_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("safetensors: prefix of %d bytes is longer than the %d-byte file",
                        prefix.size(), file_size));
  }
  // Rule 1.
  if (file_size < kLengthBytes) {
    return Malformed(0, absl::StrFormat("file is %d bytes, too small for the 8-byte header "
                                        "length",
                                        file_size));
  }
  base::ByteReader reader(prefix);
  CKPT_ASSIGN_OR_RETURN(const uint64_t n, reader.ReadU64LE());
  // Rule 2, limit first as the reference does, then the file size.
  if (n > limits.max_header_bytes) {
    return base::LimitError(
        absl::StrFormat("safetensors: header length %d is over the limit %d "
                        "(max_header_bytes; file is %d bytes; at byte offset 0)",
                        n, limits.max_header_bytes, file_size),
        "max_header_bytes", limits.max_header_bytes);
  }
  if (n > file_size - kLengthBytes) {
    return Malformed(
        0, absl::StrFormat("header length %d runs past the end of the %d-byte file", n, file_size));
  }
  CKPT_ASSIGN_OR_RETURN(const std::string_view header, reader.ReadBytes(n));

  // Rule 3.
  if (std::optional<size_t> bad = base::FirstInvalidUtf8(header)) {
    return Malformed(kLengthBytes + *bad,
                     absl::StrFormat("header is not valid UTF-8 (byte 0x%02x)",
                                     static_cast<unsigned char>(header[*bad])));
  }
  // Strict: only spaces may precede the opening brace.
  const size_t first = header.find_first_not_of(' ');
  if (first == std::string_view::npos) {
    return Malformed(kLengthBytes, "header is empty or only spaces; it must be a JSON object");
  }
  if (header[first] != '{') {
    return Malformed(kLengthBytes + first,
                     absl::StrFormat("header must start with '{' after optional spaces, found "
                                     "byte 0x%02x",
                                     static_cast<unsigned char>(header[first])));
  }

  // Rule 4 and the strict profile, in one SAX pass.
  Layout layout;
  layout.header_length = n;
  layout.data_start = kLengthBytes + n;
  layout.file_size = file_size;
  std::vector<ParsedTensor> tensors;
  const char* cursor = header.data();
  HeaderHandler handler(limits, kLengthBytes, header.data(), &cursor, &layout, &tensors);
  const bool ok = Json::sax_parse(base::JsonCursor(header.data(), &cursor),
                                  base::JsonCursor(header.data() + header.size(), &cursor),
                                  &handler, nlohmann::detail::input_format_t::json,
                                  /*strict=*/false, /*ignore_comments=*/false);
  if (!ok) {
    if (!handler.status().ok()) return handler.status();
    return absl::InternalError("safetensors: JSON parser failed without an error");
  }
  if (!handler.done()) {
    return absl::InternalError("safetensors: JSON parser stopped inside the header object");
  }
  // Padding after the object: JSON whitespace, as the reference accepts (writers use spaces).
  for (const char* p = cursor; p != header.data() + header.size(); ++p) {
    if (!IsJsonSpace(*p)) {
      return Malformed(kLengthBytes + static_cast<uint64_t>(p - header.data()),
                       absl::StrFormat("byte 0x%02x after the header's JSON object; only "
                                       "padding spaces may follow it",
                                       static_cast<unsigned char>(*p)));
    }
  }

  // Rules 5-7.
  CKPT_RETURN_IF_ERROR(CheckCoverage(tensors, layout.data_start, file_size - layout.data_start));
  layout.tensors.reserve(tensors.size());
  for (ParsedTensor& p : tensors) {
    p.t.begin += layout.data_start;
    p.t.end += layout.data_start;
    layout.tensors.push_back(std::move(p.t));
  }
  return layout;
}

absl::StatusOr<Layout> Validate(std::string_view file, const ValidatorLimits& limits) {
  return ValidateHeader(file, file.size(), limits);
}

}  // namespace ckptscan::safetensors
