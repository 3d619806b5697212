#include "core/torch/hf_index.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/json_python.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/onnx/onnx_check.h"

namespace ckptscan::torch {
namespace {

using base::AbslView;

std::string Esc(std::string_view s) {
  return base::Escaped(s, base::EscapeOptions{.escape_backslash = true, .escape_invisible = true});
}

// A state machine over the document's values, read as Python's json.loads reads them
// (base/json_python.h): a repeated key is no error, the last value wins, as in the dict
// transformers gets. Nesting is bounded by the parser (IndexLimits::max_depth).
class IndexHandler final : public base::JsonSink {
 public:
  IndexHandler(const IndexLimits& limits, ShardIndex* index, std::string* quant_method)
      : limits_(limits), index_(index), quant_method_(quant_method) {}

  bool saw_weight_map() const { return saw_weight_map_; }

  absl::Status Null(uint64_t) override { return Scalar("null"); }
  absl::Status Bool(bool, uint64_t) override { return Scalar("a boolean"); }
  absl::Status Number(const base::JsonNumber& n, uint64_t) override {
    if (state_ == State::kTotalSize) {
      // A count: a non-negative integer; anything else is kept as metadata, not read.
      index_->has_total_size = n.unsigned_value.has_value();
      index_->total_size = n.unsigned_value.value_or(0);
      state_ = State::kMetaKey;
      return absl::OkStatus();
    }
    return Scalar("a number");
  }

  absl::Status String(std::string s, uint64_t) override {
    if (state_ == State::kQuantMethod) {
      *quant_method_ = IsPlainQuantMethod(s) ? s : std::string();
      state_ = State::kQuantKey;
      return absl::OkStatus();
    }
    if (state_ != State::kMapValue) return Scalar("a string");
    if (absl::Status ok = CheckShardFileName(s); !ok.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight_map[\"", AbslView(Esc(pending_)), "\"]: ", ok.message()));
    }
    // A name given again keeps its place and takes the later file (a dict's assignment).
    const auto [it, inserted] = names_.emplace(pending_, index_->weight_map.size());
    if (inserted) {
      index_->weight_map.emplace_back(std::move(pending_), std::move(s));
    } else {
      index_->weight_map[it->second].second = std::move(s);
    }
    state_ = State::kMapKey;
    return absl::OkStatus();
  }

  absl::Status StartObject(uint64_t) override {
    switch (state_) {
      case State::kTop:
        state_ = State::kTopKey;
        return absl::OkStatus();
      case State::kMapStart:
        // weight_map given again: the later object replaces the earlier one.
        index_->weight_map.clear();
        names_.clear();
        state_ = State::kMapKey;
        return absl::OkStatus();
      case State::kMetaStart:
        index_->has_total_size = false;
        index_->total_size = 0;
        state_ = State::kMetaKey;
        return absl::OkStatus();
      case State::kQuantStart:
        state_ = State::kQuantKey;
        return absl::OkStatus();
      default:
        return Open("an object");
    }
  }
  absl::Status StartArray(uint64_t) override { return Open("an array"); }

  absl::Status Key(std::string k, uint64_t) override {
    switch (state_) {
      case State::kTopKey:
        if (k == "weight_map") {
          saw_weight_map_ = true;
          state_ = State::kMapStart;
        } else if (k == "metadata") {
          state_ = State::kMetaStart;
        } else if (k == "quantization_config") {
          quant_method_->clear();  // a later quantization_config replaces an earlier one
          state_ = State::kQuantStart;
        } else {
          Skip(State::kTopKey);
        }
        return absl::OkStatus();
      case State::kMetaKey:
        if (k == "total_size") {
          state_ = State::kTotalSize;
        } else {
          Skip(State::kMetaKey);
        }
        return absl::OkStatus();
      case State::kQuantKey:
        if (k == "quant_method") {
          quant_method_->clear();
          state_ = State::kQuantMethod;
        } else {
          Skip(State::kQuantKey);
        }
        return absl::OkStatus();
      case State::kMapKey:
        if (!names_.contains(k) && names_.size() >= limits_.max_entries) {
          return base::LimitError(absl::StrCat("weight_map has more than ", limits_.max_entries,
                                               " entries (max_index_entries)"),
                                  "max_index_entries", limits_.max_entries);
        }
        if (k.size() > limits_.max_name_bytes) {
          return base::LimitError(
              absl::StrCat("a weight_map name of ", k.size(), " bytes is over ",
                           limits_.max_name_bytes, " (max_index_name_bytes)"),
              "max_index_name_bytes", limits_.max_name_bytes);
        }
        pending_ = std::move(k);
        state_ = State::kMapValue;
        return absl::OkStatus();
      case State::kSkip:
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError("unexpected key");
    }
  }

  absl::Status EndObject(uint64_t) override {
    switch (state_) {
      case State::kTopKey:
        state_ = State::kDone;
        return absl::OkStatus();
      case State::kMapKey:
      case State::kMetaKey:
      case State::kQuantKey:
        state_ = State::kTopKey;
        return absl::OkStatus();
      case State::kSkip:
        return Close();
      default:
        return absl::InvalidArgumentError("unexpected end of object");
    }
  }
  absl::Status EndArray(uint64_t) override {
    if (state_ == State::kSkip) return Close();
    return absl::InvalidArgumentError("unexpected end of array");
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

  void Skip(State back) {
    back_ = back;
    state_ = State::kSkip;
  }

  // A scalar: the value of a skipped member, or out of place.
  absl::Status Scalar(std::string_view what) {
    switch (state_) {
      case State::kSkip:
        if (skipped_ == 0) state_ = back_;
        return absl::OkStatus();
      case State::kTotalSize:  // another type: kept as metadata, not read
        index_->has_total_size = false;
        index_->total_size = 0;
        state_ = State::kMetaKey;
        return absl::OkStatus();
      case State::kQuantStart:  // not an object (null, say): nothing declared
        state_ = State::kTopKey;
        return absl::OkStatus();
      case State::kQuantMethod:  // not a string: nothing declared
        state_ = State::kQuantKey;
        return absl::OkStatus();
      case State::kMapStart:
        return absl::InvalidArgumentError(
            absl::StrCat("weight_map must be an object, not ", AbslView(what)));
      case State::kMetaStart:
        return absl::InvalidArgumentError(
            absl::StrCat("metadata must be an object, not ", AbslView(what)));
      case State::kMapValue:
        return absl::InvalidArgumentError(absl::StrCat("weight_map[\"", AbslView(Esc(pending_)),
                                                       "\"] must be a file name (a string), not ",
                                                       AbslView(what)));
      default:
        return absl::InvalidArgumentError(absl::StrCat("unexpected ", AbslView(what)));
    }
  }

  absl::Status Open(std::string_view what) {
    if (state_ == State::kTotalSize) {
      index_->has_total_size = false;
      index_->total_size = 0;
      Skip(State::kMetaKey);
    }
    if (state_ == State::kQuantStart) Skip(State::kTopKey);
    if (state_ == State::kQuantMethod) Skip(State::kQuantKey);
    if (state_ != State::kSkip) return Scalar(what);
    ++skipped_;  // the parser bounds the depth
    return absl::OkStatus();
  }

  absl::Status Close() {
    --skipped_;
    if (skipped_ == 0) state_ = back_;
    return absl::OkStatus();
  }

  const IndexLimits& limits_;
  ShardIndex* index_;
  std::string* quant_method_;
  State state_ = State::kTop;
  State back_ = State::kTop;
  uint32_t skipped_ = 0;                            // open containers of the skipped value
  absl::flat_hash_map<std::string, size_t> names_;  // weight_map name -> its entry
  std::string pending_;
  bool saw_weight_map_ = false;
};

}  // namespace

bool LooksLikeJson(std::string_view data) {
  // Bytes whose top level is also a ModelProto (UTF-16 text can hold any byte pairs) are read
  // as the model: onnxruntime loads them, and that reading never passes a file it cannot verify.
  return base::StartsWithJsonObject(data) && !onnx_check::LooksLikeModel(data);
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
  IndexHandler handler(limits, &index, &out->quant_method);
  uint64_t offset = 0;
  const absl::Status s = base::ParsePythonJson(data, limits.max_depth, &handler, &offset);
  if (!s.ok()) {
    out->quant_method.clear();  // not JSON that transformers would read
    out->errors.push_back(StatusError(s, absl::StrCat("JSON: ", s.message()), "", offset));
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
