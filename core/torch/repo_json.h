// What a repository's JSON documents make loaders run, read from any JSON document, whatever
// its name:
//   - transformers' `auto_map` (config.json, tokenizer_config.json, ...: classes in the
//     repository's own Python files, or "org/repo--module.Class" in another Hub repository,
//     which from_pretrained(trust_remote_code=True) imports and runs), in every form it takes:
//     an object of strings or of lists (a tokenizer's [slow, fast] pair, nulls in it), a
//     tokenizer's legacy top-level list, or anything nested below;
//   - `custom_pipelines` (config.json: {"task": {"impl": "module.Class", ...}}), whose impl
//     transformers' pipeline() imports under trust_remote_code;
//   - Hydra/OmegaConf `_target_` strings at any depth (hydra.utils.instantiate imports the
//     dotted path and calls it), with whether their object has `_args_` or `_partial_`;
//   - PEFT's `base_model_name_or_path` (adapter_config.json: the model PEFT loads under the
//     adapter);
//   - `chat_template` (tokenizer_config.json: Jinja source that apply_chat_template renders).
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

// A Hydra `_target_` string.
struct ConfigTarget {
  std::string target;
  std::string where;     // its object's place: keys and [list indices], "" for the top level
  uint64_t offset = 0;   // the string's opening quote
  bool args = false;     // its object has `_args_` (positional arguments for the call)
  bool partial = false;  // its object has `_partial_: true` (a functools.partial, called later)
};

// At most this many `_target_` strings are kept per document (the rest are counted, and those
// TargetRunsCode judges so counted apart); a place is cut at kMaxWhereBytes.
inline constexpr size_t kMaxConfigTargets = 64;
inline constexpr size_t kMaxWhereBytes = 200;

struct CustomPipeline {
  std::string task;
  std::string impl;     // the class reference pipeline() imports
  uint64_t offset = 0;  // the impl string's opening quote
};

struct RepoJson {
  // Top-level auto_map: (key, class reference) per string at any depth below it, in
  // document order; the key is the auto class ("AutoModel"), "AutoTokenizer" for the legacy
  // list form (as AutoTokenizer reads it), "" for a plain string. At most kMaxAutoMapEntries,
  // the rest counted.
  std::vector<std::pair<std::string, std::string>> auto_map;
  uint64_t auto_map_total = 0;
  uint64_t auto_map_offset = 0;  // the auto_map key
  // Top-level custom_pipelines: each task's "impl" string; at most kMaxAutoMapEntries, the
  // rest counted.
  std::vector<CustomPipeline> pipelines;
  uint64_t pipelines_total = 0;
  // `_target_` strings at any depth, in document order (a repeated `_target_` key gives both
  // values: the dropped one is judged too).
  std::vector<ConfigTarget> targets;
  uint64_t targets_total = 0;
  uint64_t targets_dropped_code = 0;  // of those past kMaxConfigTargets, the TargetRunsCode ones
  // A top-level list's objects' "type" and "path" strings (sentence-transformers' modules.json:
  // each module's class and the folder it loads from); at most kMaxAutoMapEntries, the rest
  // counted.
  struct ListModule {
    std::string type;
    std::string path;
    uint64_t offset = 0;  // the object's first string
  };
  std::vector<ListModule> modules;
  uint64_t modules_total = 0;
  // Top-level base_model_name_or_path, when it is a string.
  bool has_base_model = false;
  std::string base_model;
  uint64_t base_model_offset = 0;
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
