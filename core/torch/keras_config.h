// What a Keras archive's config.json makes Keras import and run (keras.saving.load_model on a
// .keras file: a zip with config.json, metadata.json and model.weights.h5 or .npz).
//
// Keras builds every object of the config by name: {"module": M, "class_name": C,
// "registered_name": R, "config": {...}} imports M and takes C from it (or looks R up among
// registered custom objects). Judged here, object by object, against an allowlist of Keras's
// own modules:
//   - "lambda" (DANGEROUS): a Lambda layer, or a "__lambda__" function (a Python lambda kept as
//     marshalled bytecode, CVE-2024-3660);
//   - "function" (DANGEROUS): a serialized function ("class_name": "function") from a module
//     that is not Keras's (CVE-2025-1550: safe_mode let arbitrary module functions through);
//   - "dangerous_object" (DANGEROUS): a module outside Keras that runs code or touches the
//     system (os, subprocess, builtins, importlib, ...), or one of Keras's own objects that loads
//     or fetches other files or turns safe mode off (TorchModuleWrapper, TFSMLayer,
//     get_file, enable_unsafe_deserialization: CVE-2025-8747, CVE-2025-9906);
//   - "foreign_object" (SUSPICIOUS): any other module that is not Keras's, or a name of the
//     form __x__ that Keras's serialization does not write;
//   - "custom_object" (SUSPICIOUS): a registered name that is not the class name (a custom
//     class, "package>Name", whose code must already be importable: Keras runs it).
// An allowlist of modules, not of every Keras class: a Keras module's own classes are trusted
// except the named gadgets above (docs/formats.md, "Keras").
//
// Worker side (the config is untrusted bytes). Thread-safe: pure function.
#ifndef CKPTSCAN_CORE_TORCH_KERAS_CONFIG_H_
#define CKPTSCAN_CORE_TORCH_KERAS_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/torch/repo_json.h"

namespace ckptscan::torch {

struct KerasFinding {
  std::string kind;  // "lambda", "function", "dangerous_object", "foreign_object", "custom_object"
  uint64_t offset = 0;  // the object's opening brace in config.json
  std::string message;
};

std::vector<KerasFinding> JudgeKerasObjects(const std::vector<JsonObjectRef>& objects);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_KERAS_CONFIG_H_
