#include "signing/strict_json.h"

#include <cstddef>
#include <exception>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/escape.h"
#include "base/json_cursor.h"
#include "base/limit_status.h"
#include "base/strings.h"

namespace ckptscan::signing {
namespace {

using base::AbslView;

// Builds the DOM with an explicit stack of open containers.
class DomBuilder final : public nlohmann::json_sax<Json> {
 public:
  DomBuilder(std::string_view what, const Limits& limits, const char* base,
             const char* const* cursor)
      : what_(what), limits_(limits), base_(base), cursor_(cursor) {}

  const absl::Status& status() const { return status_; }
  Json TakeRoot() { return std::move(root_); }

  bool null() override { return Add(Json(nullptr)); }
  bool boolean(bool v) override { return Add(Json(v)); }
  bool number_integer(number_integer_t v) override { return Add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Add(Json(v)); }
  bool string(string_t& v) override { return Add(Json(std::move(v))); }
  bool binary(binary_t&) override { return Fail(Malformed("binary data")); }

  bool start_object(std::size_t) override { return Open(Json::object()); }
  bool start_array(std::size_t) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Json* top = stack_.back();
    if (top->contains(k)) {
      return Fail(Malformed(absl::StrFormat(
          "duplicate key \"%s\"",
          AbslView(base::Escaped(k, base::EscapeOptions{.escape_invisible = true})))));
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (status_.ok()) {
      // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 2:
      // syntax error while parsing value - unexpected end of input; ..."; keep the part after
      // the last "parse error ...: ".
      std::string msg = ex.what();
      const size_t colon = msg.find(": ");
      if (colon != std::string::npos) msg = msg.substr(colon + 2);
      status_ = absl::InvalidArgumentError(
          absl::StrFormat("%s: invalid JSON at byte offset %d: %s", AbslView(what_),
                          position > 0 ? position - 1 : 0, AbslView(msg)));
    }
    return false;
  }

 private:
  size_t Pos() const { return static_cast<size_t>(*cursor_ - base_); }

  absl::Status Malformed(std::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s (at byte offset %d)", AbslView(what_), AbslView(why), Pos()));
  }

  bool Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
    return false;
  }

  bool Count() {
    if (++values_ > limits_.max_json_values) {
      return Fail(base::LimitError(
          absl::StrFormat(
              "%s: more than %d JSON values (Limits::max_json_values; at byte offset %d)",
              AbslView(what_), limits_.max_json_values, Pos()),
          "max_json_values", limits_.max_json_values));
    }
    return true;
  }

  // Places `v` in the open container (or as the root); returns where it now lives.
  Json* Place(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    Json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  bool Add(Json v) {
    if (!Count()) return false;
    Place(std::move(v));
    return true;
  }

  bool Open(Json container) {
    if (!Count()) return false;
    if (stack_.size() >= limits_.max_json_depth) {
      return Fail(base::LimitError(
          absl::StrFormat(
              "%s: JSON nested deeper than %d (Limits::max_json_depth; at byte offset %d)",
              AbslView(what_), limits_.max_json_depth, Pos()),
          "max_json_depth", limits_.max_json_depth));
    }
    stack_.push_back(Place(std::move(container)));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  std::string_view what_;
  const Limits& limits_;
  const char* base_;
  const char* const* cursor_;
  absl::Status status_;
  Json root_;
  std::vector<Json*> stack_;
  std::string key_;
  size_t values_ = 0;
};

}  // namespace

absl::StatusOr<Json> ParseStrictJson(std::string_view text, std::string_view what,
                                     const Limits& limits) {
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: empty (0 bytes)", AbslView(what)));
  }
  const char* cursor = text.data();
  DomBuilder builder(what, limits, text.data(), &cursor);
  bool ok = false;
  try {
    ok = Json::sax_parse(base::JsonCursor(text.data(), &cursor),
                         base::JsonCursor(text.data() + text.size(), &cursor), &builder,
                         nlohmann::detail::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrFormat("%s: JSON parser raised: %s", AbslView(what), e.what()));
  }
  if (!ok) {
    if (!builder.status().ok()) return builder.status();
    return absl::InternalError(
        absl::StrFormat("%s: JSON parser failed without an error", AbslView(what)));
  }
  return builder.TakeRoot();
}

std::string JsonTypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported JSON value";
  }
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

absl::Status MissingField(std::string_view doc, std::string_view path) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: missing field %s", AbslView(doc), AbslView(path)));
}

absl::Status WrongType(std::string_view doc, std::string_view path, std::string_view expected,
                       const Json& found) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s must be %s, found %s", AbslView(doc),
                                                    AbslView(path), AbslView(expected),
                                                    JsonTypeName(found)));
}

absl::StatusOr<const Json*> RequiredObject(const Json& obj, std::string_view key,
                                           std::string_view doc, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return MissingField(doc, path);
  if (!v->is_object()) return WrongType(doc, path, "an object", *v);
  return v;
}

absl::StatusOr<const Json*> RequiredArray(const Json& obj, std::string_view key,
                                          std::string_view doc, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return MissingField(doc, path);
  if (!v->is_array()) return WrongType(doc, path, "an array", *v);
  return v;
}

absl::StatusOr<const std::string*> RequiredString(const Json& obj, std::string_view key,
                                                  std::string_view doc, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return MissingField(doc, path);
  if (!v->is_string()) return WrongType(doc, path, "a string", *v);
  return &v->get_ref<const std::string&>();
}

std::string Quoted(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

}  // namespace ckptscan::signing
