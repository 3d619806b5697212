#include "core/torch/keras_config.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "base/strings.h"
#include "core/torch/code_names.h"

namespace ckptscan::torch {
namespace {

using base::AbslView;

// Keras's own modules: "keras" and everything under it (keras.layers, keras.src.models, ...).
bool IsKerasModule(std::string_view m) {
  return m == "keras" || (m.size() > 6 && m.substr(0, 6) == "keras.");
}

// Keras's own objects that load other files, fetch URLs, wrap arbitrary framework modules or
// turn safe mode off.
constexpr std::string_view kKerasGadgets[] = {"TorchModuleWrapper",
                                              "TFSMLayer",
                                              "JaxLayer",
                                              "FlaxLayer",
                                              "get_file",
                                              "enable_unsafe_deserialization",
                                              "load_model",
                                              "load_weights",
                                              "save_model",
                                              "save_weights",
                                              "register_keras_serializable"};

// The class names Keras's serialization writes for values that are not objects
// (keras.saving.serialization_lib).
constexpr std::string_view kValueClasses[] = {"__tensor__",   "__numpy__",    "__bytes__",
                                              "__typespec__", "__ellipsis__", "__slice__",
                                              "__tuple__"};

template <size_t N>
bool In(std::string_view s, const std::string_view (&list)[N]) {
  for (std::string_view x : list) {
    if (s == x) return true;
  }
  return false;
}

bool IsDunder(std::string_view s) {
  return s.size() >= 4 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
}

}  // namespace

std::vector<KerasFinding> JudgeKerasObjects(const std::vector<JsonObjectRef>& objects) {
  std::vector<KerasFinding> out;
  for (const JsonObjectRef& o : objects) {
    const std::string what_name = o.class_name == "function" ? o.config : o.class_name;
    const std::string what = o.module.empty() ? base::Quoted(what_name)
                                              : absl::StrCat(AbslView(base::Quoted(o.module)), ".",
                                                             AbslView(base::Quoted(what_name)));
    const auto add = [&](std::string_view kind, std::string message) {
      out.push_back(KerasFinding{std::string(kind), o.offset, std::move(message)});
    };
    if (o.class_name == "__lambda__" || o.class_name == "Lambda") {
      add("lambda", absl::StrCat(AbslView(what),
                                 ": a Lambda layer or lambda function, which Keras rebuilds from "
                                 "marshalled Python bytecode or a named function and calls "
                                 "(CVE-2024-3660)"));
      continue;
    }
    // A function's name is its "config" (serialization_lib's deserialize_keras_object), its
    // registered name the custom-object lookup's key.
    const bool function = o.class_name == "function";
    if (In(o.class_name, kKerasGadgets) ||
        (function && (In(o.config, kKerasGadgets) || In(o.registered_name, kKerasGadgets)))) {
      add("dangerous_object",
          absl::StrCat(AbslView(what),
                       ": a Keras object that loads or fetches other files, wraps another "
                       "framework's code or turns safe mode off (CVE-2025-8747, CVE-2025-9906)"));
      continue;
    }
    const bool keras = o.module.empty() || IsKerasModule(o.module);
    if (function && !keras) {
      add("function", absl::StrCat("a function ", AbslView(base::Quoted(o.config)), " from module ",
                                   AbslView(base::Quoted(o.module)),
                                   ": Keras imports the module and calls it (CVE-2025-1550)"));
      continue;
    }
    if (!keras) {
      if (IsSystemModule(o.module) || IsFrameworkModule(o.module)) {
        add("dangerous_object", absl::StrCat(AbslView(what),
                                             ": Keras imports this module and builds or calls "
                                             "the object (CVE-2025-1550)"));
      } else {
        add("foreign_object",
            absl::StrCat(AbslView(what),
                         ": a module that is not Keras's; Keras imports it and builds the object"));
      }
      continue;
    }
    if (IsDunder(o.class_name) && !In(o.class_name, kValueClasses)) {
      add("foreign_object",
          absl::StrCat(AbslView(what), ": a class name Keras's serialization does not write"));
      continue;
    }
    if (!o.registered_name.empty() && o.registered_name != o.class_name &&
        !(function && o.registered_name == o.config)) {
      add("custom_object",
          absl::StrCat(AbslView(what), " registered as ", AbslView(base::Quoted(o.registered_name)),
                       ": a custom object whose code Keras looks up and runs"));
    }
  }
  return out;
}

}  // namespace ckptscan::torch
