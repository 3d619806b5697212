#include "core/torch/repo_json.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json_python.h"
#include "base/limit_status.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {
namespace {

// Every value is tracked by its path of frames (an explicit stack, bounded by the parser at
// max_depth); only the few paths that matter are looked at. A repeated key is read as Python's
// dict keeps it: the last value wins, so a key's earlier value is dropped when it comes again.
class RepoJsonHandler final : public base::JsonSink {
 public:
  RepoJsonHandler(RepoJson* out, bool objects) : out_(out), objects_(objects) {}

  absl::Status Null(uint64_t) override { return absl::OkStatus(); }
  absl::Status Bool(bool, uint64_t) override { return absl::OkStatus(); }
  absl::Status Number(const base::JsonNumber&, uint64_t) override { return absl::OkStatus(); }

  absl::Status String(std::string s, uint64_t offset) override {
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
        out_->auto_map.emplace_back(frames_[1].key, std::move(s));
      }
    } else if (n == 1 && frames_[0].key == "chat_template") {
      out_->templates.push_back(JsonTemplate{"default", std::move(s), offset});
    } else if (n == 3 && frames_[0].key == "chat_template" && !frames_[1].object &&
               frames_[2].object) {
      if (frames_[2].key == "template") {
        item_template_ = JsonTemplate{"", std::move(s), offset};
        has_item_template_ = true;
      } else if (frames_[2].key == "name") {
        item_name_ = std::move(s);
      }
    }
    return absl::OkStatus();
  }

  absl::Status StartObject(uint64_t offset) override { return Open(true, offset); }
  absl::Status StartArray(uint64_t offset) override { return Open(false, offset); }

  absl::Status Key(std::string k, uint64_t offset) override {
    if (frames_.empty() || !frames_.back().object) {
      return absl::InvalidArgumentError("unexpected key");
    }
    const size_t n = frames_.size();
    Frame& f = frames_.back();
    // The value this key had before is replaced: forget what it gave.
    if (k == "class_name") {
      f.has_class = false;
      f.ref.class_name.clear();
    } else if (k == "module") {
      f.ref.module.clear();
    } else if (k == "registered_name") {
      f.ref.registered_name.clear();
    } else if (k == "config") {
      f.ref.config.clear();
    }
    if (n == 1 && k == "auto_map") {
      out_->auto_map.clear();
      out_->auto_map_total = 0;
      out_->auto_map_offset = offset;
    } else if (n == 1 && k == "chat_template") {
      out_->templates.clear();
    } else if (n == 2 && frames_[0].key == "auto_map") {
      const uint64_t dropped = static_cast<uint64_t>(
          std::erase_if(out_->auto_map, [&](const auto& e) { return e.first == k; }));
      out_->auto_map_total -= std::min(dropped, out_->auto_map_total);
    } else if (n == 3 && frames_[0].key == "chat_template" && !frames_[1].object) {
      if (k == "template") has_item_template_ = false;
      if (k == "name") item_name_.clear();
    }
    f.key = std::move(k);
    return absl::OkStatus();
  }
  absl::Status EndObject(uint64_t) override { return Close(); }
  absl::Status EndArray(uint64_t) override { return Close(); }

 private:
  struct Frame {
    bool object = false;
    std::string key;         // objects: the member being read
    bool has_class = false;  // objects: a "class_name" string was read
    JsonObjectRef ref;
  };

  absl::Status Open(bool object, uint64_t offset) {
    if (object && frames_.size() == 2 && frames_[0].key == "chat_template" && !frames_[1].object) {
      has_item_template_ = false;
      item_name_.clear();
    }
    frames_.push_back(Frame{object, {}, false, {}});
    frames_.back().ref.offset = offset;
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (frames_.empty()) return absl::InvalidArgumentError("unexpected end");
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
    return absl::OkStatus();
  }

  RepoJson* out_;
  bool objects_;
  std::vector<Frame> frames_;
  JsonTemplate item_template_;
  bool has_item_template_ = false;
  std::string item_name_;
};

}  // namespace

absl::Status ReadRepoJson(std::string_view data, const IndexLimits& limits, RepoJson* out,
                          uint64_t* error_offset, bool objects) {
  *error_offset = 0;
  if (data.size() > limits.max_bytes) {
    return base::LimitError(absl::StrCat("a JSON file of ", data.size(), " bytes is over ",
                                         limits.max_bytes, " (max_index_bytes)"),
                            "max_index_bytes", limits.max_bytes);
  }
  RepoJsonHandler handler(out, objects);
  return base::ParsePythonJson(data, limits.max_depth, &handler, error_offset);
}

}  // namespace ckptscan::torch
