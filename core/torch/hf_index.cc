#include "core/torch/hf_index.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/json_cursor.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "nlohmann/json.hpp"

namespace ckptscan::torch {
namespace {

using Json = nlohmann::json;
using base::AbslView;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

// A state machine over SAX events. Nesting is bounded: the known members have fixed depth and
// skipped values are tracked on an explicit stack of at most IndexLimits::max_depth levels.
class IndexHandler final : public nlohmann::json_sax<Json> {
 public:
  IndexHandler(const IndexLimits& limits, const char* base, const char* const* cursor,
               ShardIndex* index, std::string* quant_method)
      : limits_(limits), base_(base), cursor_(cursor), index_(index), quant_method_(quant_method) {}

  const absl::Status& status() const { return status_; }
  bool saw_weight_map() const { return saw_weight_map_; }
  uint64_t error_offset() const { return error_offset_; }

  bool null() override { return Scalar("null"); }
  bool boolean(bool) override { return Scalar("a boolean"); }
  bool number_integer(number_integer_t) override { return Scalar("a number"); }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::kTotalSize) {
      index_->has_total_size = true;
      index_->total_size = v;
      state_ = State::kMetaKey;
      return true;
    }
    return Scalar("a number");
  }
  bool number_float(number_float_t, const string_t&) override { return Scalar("a number"); }
  bool binary(binary_t&) override { return Scalar("binary data"); }

  bool string(string_t& s) override {
    if (state_ == State::kQuantMethod) {
      *quant_method_ = IsPlainQuantMethod(s) ? s : std::string();
      state_ = State::kQuantKey;
      return true;
    }
    if (state_ != State::kMapValue) return Scalar("a string");
    if (absl::Status ok = CheckShardFileName(s); !ok.ok()) {
      return Fail(absl::StrCat("weight_map[\"", AbslView(Esc(pending_)), "\"]: ", ok.message()));
    }
    index_->weight_map.emplace_back(std::move(pending_), s);
    state_ = State::kMapKey;
    return true;
  }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::kTop:
        state_ = State::kTopKey;
        keys_.emplace_back();
        return true;
      case State::kMapStart:
        state_ = State::kMapKey;
        return true;
      case State::kMetaStart:
        state_ = State::kMetaKey;
        keys_.emplace_back();
        return true;
      case State::kQuantStart:
        state_ = State::kQuantKey;
        keys_.emplace_back();
        return true;
      default:
        return Open(/*object=*/true, "an object");
    }
  }
  bool start_array(std::size_t) override { return Open(/*object=*/false, "an array"); }

  bool key(string_t& k) override {
    switch (state_) {
      case State::kTopKey:
        if (!keys_.back().insert(k).second) return Fail(Dup("", k));
        if (k == "weight_map") {
          saw_weight_map_ = true;
          state_ = State::kMapStart;
        } else if (k == "metadata") {
          state_ = State::kMetaStart;
        } else if (k == "quantization_config") {
          state_ = State::kQuantStart;
        } else {
          Skip(State::kTopKey);
        }
        return true;
      case State::kMetaKey:
        if (!keys_.back().insert(k).second) return Fail(Dup("metadata", k));
        if (k == "total_size") {
          state_ = State::kTotalSize;
        } else {
          Skip(State::kMetaKey);
        }
        return true;
      case State::kQuantKey:
        if (!keys_.back().insert(k).second) return Fail(Dup("quantization_config", k));
        if (k == "quant_method") {
          state_ = State::kQuantMethod;
        } else {
          Skip(State::kQuantKey);
        }
        return true;
      case State::kMapKey:
        if (!names_.insert(k).second) return Fail(Dup("weight_map", k));
        if (names_.size() > limits_.max_entries) {
          return Limit(absl::StrCat("weight_map has more than ", limits_.max_entries,
                                    " entries (IndexLimits::max_entries)"),
                       "max_entries", limits_.max_entries);
        }
        if (k.size() > limits_.max_name_bytes) {
          return Limit(absl::StrCat("a weight_map name of ", k.size(), " bytes is over ",
                                    limits_.max_name_bytes, " (IndexLimits::max_name_bytes)"),
                       "max_name_bytes", limits_.max_name_bytes);
        }
        pending_ = std::move(k);
        state_ = State::kMapValue;
        return true;
      case State::kSkip:
        if (!skip_.back().object) return Fail("unexpected key");
        if (!skip_.back().keys.insert(k).second) return Fail(Dup("a nested object", k));
        return true;
      default:
        return Fail("unexpected key");
    }
  }

  bool end_object() override {
    switch (state_) {
      case State::kTopKey:
        keys_.pop_back();
        state_ = State::kDone;
        return true;
      case State::kMapKey:
        state_ = State::kTopKey;
        return true;
      case State::kMetaKey:
      case State::kQuantKey:
        keys_.pop_back();
        state_ = State::kTopKey;
        return true;
      case State::kSkip:
        return Close();
      default:
        return Fail("unexpected end of object");
    }
  }
  bool end_array() override {
    if (state_ == State::kSkip) return Close();
    return Fail("unexpected end of array");
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    status_ = base::JsonSyntaxError(position, ex.what(), &error_offset_);
    return false;
  }

 private:
  enum class State {
    kTop,
    kTopKey,
    kMapStart,
    kMapKey,
    kMapValue,
    kMetaStart,
    kMetaKey,
    kTotalSize,
    kQuantStart,   // the value of quantization_config
    kQuantKey,     // inside it
    kQuantMethod,  // the value of its quant_method
    kSkip,
    kDone,
  };
  struct Skipped {
    bool object;
    std::set<std::string> keys;
  };

  uint64_t Pos() const { return static_cast<uint64_t>(*cursor_ - base_); }

  bool Fail(std::string_view what) {
    error_offset_ = Pos();
    status_ = absl::InvalidArgumentError(std::string(what));
    return false;
  }
  bool Limit(std::string_view what, std::string_view limit, uint64_t value) {
    error_offset_ = Pos();
    status_ = base::LimitError(what, limit, value);
    return false;
  }
  static std::string Dup(std::string_view where, std::string_view k) {
    return absl::StrCat("duplicate key \"", AbslView(Esc(k)), "\"", where.empty() ? "" : " in ",
                        AbslView(where));
  }

  void Skip(State back) {
    back_ = back;
    state_ = State::kSkip;
  }

  // A scalar: the value of a skipped member, or out of place.
  bool Scalar(std::string_view what) {
    switch (state_) {
      case State::kSkip:
        if (skip_.empty()) state_ = back_;
        return true;
      case State::kTotalSize:  // another type: kept as metadata, not read
        state_ = State::kMetaKey;
        return true;
      case State::kQuantStart:  // not an object (null, say): nothing declared
        state_ = State::kTopKey;
        return true;
      case State::kQuantMethod:  // not a string: nothing declared
        state_ = State::kQuantKey;
        return true;
      case State::kMapStart:
        return Fail(absl::StrCat("weight_map must be an object, not ", AbslView(what)));
      case State::kMetaStart:
        return Fail(absl::StrCat("metadata must be an object, not ", AbslView(what)));
      case State::kMapValue:
        return Fail(absl::StrCat("weight_map[\"", AbslView(Esc(pending_)),
                                 "\"] must be a file name (a string), not ", AbslView(what)));
      default:
        return Fail(absl::StrCat("unexpected ", AbslView(what)));
    }
  }

  bool Open(bool object, std::string_view what) {
    if (state_ == State::kTotalSize) Skip(State::kMetaKey);
    if (state_ == State::kQuantStart) Skip(State::kTopKey);
    if (state_ == State::kQuantMethod) Skip(State::kQuantKey);
    if (state_ != State::kSkip) return Scalar(what);
    if (skip_.size() >= limits_.max_depth) {
      return Limit(absl::StrCat("values nested deeper than ", limits_.max_depth,
                                " (IndexLimits::max_depth)"),
                   "max_depth", limits_.max_depth);
    }
    skip_.push_back(Skipped{object, {}});
    return true;
  }

  bool Close() {
    skip_.pop_back();
    if (skip_.empty()) state_ = back_;
    return true;
  }

  const IndexLimits& limits_;
  const char* base_;
  const char* const* cursor_;
  ShardIndex* index_;
  std::string* quant_method_;
  State state_ = State::kTop;
  State back_ = State::kTop;
  std::vector<std::set<std::string>> keys_;  // keys seen at the top level and in metadata
  std::vector<Skipped> skip_;
  std::set<std::string> names_;
  std::string pending_;
  bool saw_weight_map_ = false;
  absl::Status status_;
  uint64_t error_offset_ = 0;
};

}  // namespace

bool LooksLikeJson(std::string_view data) {
  size_t i = 0;
  while (i < data.size() && IsJsonSpace(data[i])) ++i;
  return i < data.size() && data[i] == '{';
}

void ReadShardIndex(std::string_view data, const IndexLimits& limits, FileFacts* out) {
  out->format = "json";
  if (data.size() > limits.max_bytes) {
    const std::string what = absl::StrCat("a JSON file of ", data.size(), " bytes is over ",
                                          limits.max_bytes, " (IndexLimits::max_bytes)");
    out->errors.push_back(
        StatusError(base::LimitError(what, "max_index_bytes", limits.max_bytes), what, "", 0));
    return;
  }
  ShardIndex index;
  const char* cursor = data.data();
  IndexHandler handler(limits, data.data(), &cursor, &index, &out->quant_method);
  const bool ok = Json::sax_parse(base::JsonCursor(data.data(), &cursor),
                                  base::JsonCursor(data.data() + data.size(), &cursor), &handler,
                                  nlohmann::detail::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (!ok) {
    out->quant_method.clear();  // not JSON that transformers would read
    const absl::Status& s = handler.status();
    out->errors.push_back(StatusError(
        s, absl::StrCat("JSON: ", s.ok() ? absl::string_view("the parser stopped") : s.message()),
        "", handler.error_offset()));
    return;
  }
  // Valid JSON without a weight_map: a JSON document (data; its auto_map and chat_template are
  // read by the caller, core/torch/repo_json.h).
  if (!handler.saw_weight_map()) return;
  out->format = "hf-index";
  index.present = true;
  out->shard_index = std::move(index);
}

}  // namespace ckptscan::torch
