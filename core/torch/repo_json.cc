#include "core/torch/repo_json.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json_python.h"
#include "base/limit_status.h"
#include "base/strings.h"
#include "core/torch/code_names.h"
#include "core/torch/file_facts.h"

namespace ckptscan::torch {
namespace {

// Every value is tracked by its path of frames (an explicit stack, bounded by the parser at
// max_depth); only the few paths that matter are looked at. A repeated key is read as Python's
// dict keeps it: the last value wins, so a key's earlier value is dropped when it comes again
// (except a `_target_` and what lies below auto_map and custom_pipelines: their dropped values
// are kept, which only adds findings).
class RepoJsonHandler final : public base::JsonSink {
 public:
  RepoJsonHandler(RepoJson* out, bool objects) : out_(out), objects_(objects) {}

  absl::Status Null(uint64_t) override {
    Element();
    return absl::OkStatus();
  }
  absl::Status Bool(bool b, uint64_t) override {
    Element();
    if (b && !frames_.empty() && frames_.back().object && frames_.back().key == "_partial_") {
      frames_.back().partial = true;
    }
    return absl::OkStatus();
  }
  absl::Status Number(const base::JsonNumber&, uint64_t) override {
    Element();
    return absl::OkStatus();
  }

  absl::Status String(std::string s, uint64_t offset) override {
    Element();
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
    if (n > 0 && frames_.back().object && frames_.back().key == "_target_") Target(s, offset);
    if (n >= 1 && frames_[0].object && frames_[0].key == "auto_map") {
      // As transformers reads it: an object of class references or [slow, fast] lists; a
      // tokenizer's legacy list is AutoTokenizer's; a plain string, or anything nested deeper,
      // names code all the same.
      ++out_->auto_map_total;
      if (out_->auto_map.size() < kMaxAutoMapEntries) {
        std::string key = n == 1 ? "" : frames_[1].object ? frames_[1].key : "AutoTokenizer";
        out_->auto_map.emplace_back(std::move(key), std::move(s));
      }
    } else if (n == 3 && frames_[0].object && frames_[0].key == "custom_pipelines" &&
               frames_[1].object && frames_[2].object && frames_[2].key == "impl") {
      ++out_->pipelines_total;
      if (out_->pipelines.size() < kMaxAutoMapEntries) {
        out_->pipelines.push_back(CustomPipeline{frames_[1].key, std::move(s), offset});
      }
    } else if (n == 2 && !frames_[0].object && frames_[1].object &&
               (frames_[1].key == "type" || frames_[1].key == "path")) {
      // One entry per list item: the item's first "type" or "path" string opens it.
      if (module_item_ != frames_[1].ref.offset || out_->modules_total == 0) {
        module_item_ = frames_[1].ref.offset;
        ++out_->modules_total;
        if (out_->modules.size() < kMaxAutoMapEntries) {
          out_->modules.push_back(RepoJson::ListModule{{}, {}, offset});
        }
      }
      if (out_->modules.size() == out_->modules_total) {
        (frames_[1].key == "type" ? out_->modules.back().type : out_->modules.back().path) =
            std::move(s);
      }
    } else if (n == 1 && frames_[0].object && frames_[0].key == "base_model_name_or_path") {
      out_->has_base_model = true;
      out_->base_model = std::move(s);
      out_->base_model_offset = offset;
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
    } else if (k == "_args_") {
      f.args = true;
    } else if (k == "_partial_") {
      f.partial = false;  // true again only if this value is
    }
    if (n == 1 && k == "auto_map") {
      out_->auto_map.clear();
      out_->auto_map_total = 0;
      out_->auto_map_offset = offset;
    } else if (n == 1 && k == "custom_pipelines") {
      out_->pipelines.clear();
      out_->pipelines_total = 0;
    } else if (n == 1 && k == "base_model_name_or_path") {
      out_->has_base_model = false;
      out_->base_model.clear();
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
    uint64_t elements = 0;   // arrays: the elements begun (the one being read is elements - 1)
    bool has_class = false;  // objects: a "class_name" string was read
    JsonObjectRef ref;
    size_t target = SIZE_MAX;  // objects: its last `_target_` in out_->targets, if kept
    bool args = false;         // objects: an `_args_` key
    bool partial = false;      // objects: `_partial_` is true
  };

  // A value begins: an array counts its elements (for a target's place).
  void Element() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().elements;
  }

  // The place of the innermost object: the keys and indices that lead to it, cut at
  // kMaxWhereBytes.
  std::string Where() const {
    std::string where;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.object) {
        absl::StrAppend(&where, where.empty() ? "" : ".",
                        base::AbslView(std::string_view(f.key).substr(0, kMaxWhereBytes + 1)));
      } else {
        absl::StrAppend(&where, "[", f.elements - 1, "]");
      }
      if (where.size() > kMaxWhereBytes) {
        where.resize(kMaxWhereBytes);
        where += "...";
        break;
      }
    }
    return where;
  }

  void Target(std::string s, uint64_t offset) {
    ++out_->targets_total;
    if (out_->targets.size() >= kMaxConfigTargets) {
      if (TargetRunsCode(s)) ++out_->targets_dropped_code;
      return;
    }
    frames_.back().target = out_->targets.size();
    out_->targets.push_back(ConfigTarget{std::move(s), Where(), offset});
  }

  absl::Status Open(bool object, uint64_t offset) {
    Element();
    if (object && frames_.size() == 2 && frames_[0].key == "chat_template" && !frames_[1].object) {
      has_item_template_ = false;
      item_name_.clear();
    }
    frames_.push_back(Frame{});
    frames_.back().object = object;
    frames_.back().ref.offset = offset;
    return absl::OkStatus();
  }

  absl::Status Close() {
    if (frames_.empty()) return absl::InvalidArgumentError("unexpected end");
    Frame& f = frames_.back();
    if (f.has_class) {
      ++out_->objects_total;
      if (out_->objects.size() < kMaxJsonObjectRefs) {
        out_->objects.push_back(std::move(f.ref));
      }
    }
    if (f.target < out_->targets.size()) {
      out_->targets[f.target].args = f.args;
      out_->targets[f.target].partial = f.partial;
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

  uint64_t module_item_ = 0;  // the list item the last modules entry came from
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
