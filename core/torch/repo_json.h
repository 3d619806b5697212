// What a repository's JSON documents make loaders run: transformers' `auto_map` (config.json,
// tokenizer_config.json, ...: classes in the repository's own Python files, which
// from_pretrained(trust_remote_code=True) imports and runs) and `chat_template`
// (tokenizer_config.json: Jinja source that apply_chat_template renders), read from any JSON
// document, whatever its name.
//
// ReadRepoJson reads the document as transformers and Keras do, with Python's json.loads of
// the bytes (base/json_python.h, as ReadShardIndex does): a BOM, UTF-16 and UTF-32, NaN and
// Infinity, lone surrogates, and a repeated key whose last value wins, as in the dict they
// get; nesting bounded by IndexLimits::max_depth on an explicit stack. The error names what
// and where (byte offset).
//
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_TORCH_REPO_JSON_H_
#define CKPTSCAN_CORE_TORCH_REPO_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/torch/hf_index.h"

namespace ckptscan::torch {

struct JsonTemplate {
  std::string name;     // "default" for a plain string, else the list entry's "name"
  std::string text;     // decoded
  uint64_t offset = 0;  // the JSON string's opening quote
};

// A JSON object with a "class_name" string: how Keras's config.json names what it builds
// (keras.saving's serialize_keras_object writes {"module", "class_name", "config",
// "registered_name"}; Keras 2 wrote {"class_name", "config"}).
struct JsonObjectRef {
  std::string module;  // "" when absent or not a string
  std::string class_name;
  std::string registered_name;  // "" when absent, null or not a string
  std::string config;           // "config" when it is a string (a function's name), else ""
  uint64_t offset = 0;          // the object's opening brace
};

// At most this many object references are kept per document (the rest are counted).
inline constexpr size_t kMaxJsonObjectRefs = 100000;

struct RepoJson {
  // Top-level auto_map: (key, class reference) per string value (a list value gives one entry
  // per string in it), in document order; at most kMaxAutoMapEntries, the rest counted.
  std::vector<std::pair<std::string, std::string>> auto_map;
  uint64_t auto_map_total = 0;
  uint64_t auto_map_offset = 0;  // the auto_map key
  // Top-level chat_template: a string, or a list of {"name": ..., "template": ...}.
  std::vector<JsonTemplate> templates;
  // With `objects` requested: every object with a "class_name" string, innermost first (an
  // object is listed when it closes); at most kMaxJsonObjectRefs, the rest counted.
  std::vector<JsonObjectRef> objects;
  uint64_t objects_total = 0;
};

// OK with `out` filled, or the parse error (InvalidArgument, or a base::LimitError) with its
// byte offset in *error_offset.
// `objects`: also collect RepoJson::objects (a Keras archive's config.json).
absl::Status ReadRepoJson(std::string_view data, const IndexLimits& limits, RepoJson* out,
                          uint64_t* error_offset, bool objects = false);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_REPO_JSON_H_
