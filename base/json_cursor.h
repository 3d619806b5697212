// JsonCursor: an input iterator over a byte range for nlohmann::json's SAX parser that
// publishes how far the lexer has read, so that SAX callbacks can report byte offsets of
// untrusted JSON (safetensors headers, index files, signature bundles).
//
//   const char* cursor = text.data();
//   Json::sax_parse(base::JsonCursor(text.data(), &cursor),
//                   base::JsonCursor(text.data() + text.size(), &cursor), &handler, ...);
//   // in a callback: offset = cursor - text.data()
#ifndef CKPTSCAN_BASE_JSON_CURSOR_H_
#define CKPTSCAN_BASE_JSON_CURSOR_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/escape.h"

namespace ckptscan::base {

class JsonCursor final {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  JsonCursor(const char* p, const char** cursor) : p_(p), cursor_(cursor) {}
  reference operator*() const { return *p_; }
  JsonCursor& operator++() {
    ++p_;
    *cursor_ = p_;
    return *this;
  }
  JsonCursor operator++(int) {
    JsonCursor old = *this;
    ++*this;
    return old;
  }
  bool operator==(const JsonCursor& o) const { return p_ == o.p_; }
  bool operator!=(const JsonCursor& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** cursor_;
};

// For a SAX handler's parse_error(position, token, exception): sets `offset` to the byte the
// lexer stopped at (it has read one past it) and returns InvalidArgument quoting the parser's
// message (`what`), escaped for reports.
inline absl::Status JsonSyntaxError(std::size_t position, const char* what, uint64_t* offset) {
  *offset = position > 0 ? position - 1 : 0;
  return absl::InvalidArgumentError(absl::StrCat(
      "not valid JSON: ", Escaped(what, EscapeOptions{.escape_backslash = true,
                                                     .escape_invisible = true})));
}

}  // namespace ckptscan::base

#endif  // CKPTSCAN_BASE_JSON_CURSOR_H_
