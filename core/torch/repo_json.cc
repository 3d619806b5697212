#include "core/torch/repo_json.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/json_cursor.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/torch/file_facts.h"
#include "nlohmann/json.hpp"

namespace ckptscan::torch {
namespace {

using Json = nlohmann::json;
using base::AbslView;

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

// Every value is tracked by its path of frames (an explicit stack, at most max_depth deep);
// only the few paths that matter are looked at.
class RepoJsonHandler final : public nlohmann::json_sax<Json> {
 public:
  RepoJsonHandler(const IndexLimits& limits, std::string_view data, const char* const* cursor,
                  RepoJson* out, bool objects)
      : limits_(limits), data_(data), cursor_(cursor), out_(out), objects_(objects) {}

  const absl::Status& status() const { return status_; }
  uint64_t error_offset() const { return error_offset_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }

  bool string(string_t& s) override {
    const size_t n = frames_.size();
    if (objects_ && n > 0 && frames_.back().object) {
      Frame& f = frames_.back();
      if (f.key == "class_name") {
        f.ref.class_name = s;
        f.has_class = true;
      } else if (f.key == "module") {
        f.ref.module = s;
      } else if (f.key == "registered_name") {
        f.ref.registered_name = s;
      } else if (f.key == "config") {
        f.ref.config = s;
      }
    }
    if (n >= 2 && frames_[0].key == "auto_map" && frames_[1].object &&
        (n == 2 || (n == 3 && !frames_[2].object))) {
      ++out_->auto_map_total;
      if (out_->auto_map.size() < kMaxAutoMapEntries) {
        out_->auto_map.emplace_back(frames_[1].key, s);
      }
    } else if (n == 1 && frames_[0].key == "chat_template") {
      out_->templates.push_back(JsonTemplate{"default", s, StringStart()});
    } else if (n == 3 && frames_[0].key == "chat_template" && !frames_[1].object &&
               frames_[2].object) {
      if (frames_[2].key == "template") {
        item_template_ = JsonTemplate{"", s, StringStart()};
        has_item_template_ = true;
      } else if (frames_[2].key == "name") {
        item_name_ = s;
      }
    }
    return Value();
  }

  bool start_object(std::size_t) override { return Open(true); }
  bool start_array(std::size_t) override { return Open(false); }
  bool key(string_t& k) override {
    if (frames_.empty() || !frames_.back().object) return Fail("unexpected key");
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      return Fail(absl::StrCat("duplicate key \"", AbslView(Esc(k)), "\""));
    }
    if (frames_.size() == 1 && k == "auto_map") out_->auto_map_offset = Pos();
    f.key = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    status_ = base::JsonSyntaxError(position, ex.what(), &error_offset_);
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    std::string key;  // objects: the member being read
    std::set<std::string> keys;
    bool has_class = false;  // objects: a "class_name" string was read
    JsonObjectRef ref;
  };

  uint64_t Pos() const { return static_cast<uint64_t>(*cursor_ - data_.data()); }

  // The opening quote of the string token that ends just before Pos(): the nearest '"' before
  // the closing one that is not escaped (inside a valid string every '"' is escaped).
  uint64_t StringStart() const {
    uint64_t end = Pos();
    if (end < 2 || end > data_.size()) return 0;
    for (uint64_t i = end - 1; i-- > 0;) {
      if (data_[i] != '"') continue;
      uint64_t slashes = 0;
      while (slashes < i && data_[i - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return i;
    }
    return 0;
  }

  bool Fail(std::string_view what) {
    error_offset_ = Pos();
    status_ = absl::InvalidArgumentError(std::string(what));
    return false;
  }

  bool Value() { return true; }

  bool Open(bool object) {
    if (frames_.size() >= limits_.max_depth) {
      error_offset_ = Pos();
      status_ = base::LimitError(absl::StrCat("values nested deeper than ", limits_.max_depth,
                                              " (IndexLimits::max_depth)"),
                                 "max_depth", limits_.max_depth);
      return false;
    }
    if (object && frames_.size() == 2 && frames_[0].key == "chat_template" && !frames_[1].object) {
      has_item_template_ = false;
      item_name_.clear();
    }
    frames_.push_back(Frame{object, {}, {}, false, {}});
    frames_.back().ref.offset = Pos() > 0 ? Pos() - 1 : 0;
    return true;
  }

  bool Close() {
    if (frames_.empty()) return Fail("unexpected end");
    if (frames_.back().has_class) {
      ++out_->objects_total;
      if (out_->objects.size() < kMaxJsonObjectRefs) {
        out_->objects.push_back(std::move(frames_.back().ref));
      }
    }
    frames_.pop_back();
    if (frames_.size() == 2 && frames_[0].key == "chat_template" && !frames_[1].object &&
        has_item_template_) {
      item_template_.name = item_name_.empty() ? "(unnamed)" : item_name_;
      out_->templates.push_back(std::move(item_template_));
      has_item_template_ = false;
    }
    return true;
  }

  const IndexLimits& limits_;
  std::string_view data_;
  const char* const* cursor_;
  RepoJson* out_;
  bool objects_;
  std::vector<Frame> frames_;
  JsonTemplate item_template_;
  bool has_item_template_ = false;
  std::string item_name_;
  absl::Status status_;
  uint64_t error_offset_ = 0;
};

}  // namespace

absl::Status ReadRepoJson(std::string_view data, const IndexLimits& limits, RepoJson* out,
                          uint64_t* error_offset, bool objects) {
  *error_offset = 0;
  if (data.size() > limits.max_bytes) {
    return base::LimitError(absl::StrCat("a JSON file of ", data.size(), " bytes is over ",
                                         limits.max_bytes, " (IndexLimits::max_bytes)"),
                            "max_index_bytes", limits.max_bytes);
  }
  const char* cursor = data.data();
  RepoJsonHandler handler(limits, data, &cursor, out, objects);
  const bool ok = Json::sax_parse(base::JsonCursor(data.data(), &cursor),
                                  base::JsonCursor(data.data() + data.size(), &cursor), &handler,
                                  nlohmann::detail::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (ok) return absl::OkStatus();
  *error_offset = handler.error_offset();
  return handler.status().ok() ? absl::InvalidArgumentError("not valid JSON: the parser stopped")
                               : handler.status();
}

}  // namespace ckptscan::torch
