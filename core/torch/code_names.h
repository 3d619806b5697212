// Names in a repository's configuration files that make a loader import code, judged by name
// alone: the module families a config must never need (shared by the Keras config reading and
// the Hydra `_target_` judgement), transformers' class references to other Hub repositories,
// and model paths that leave the scanned folder.
//
// Thread-safe: pure functions over the names (no I/O, nothing resolved or imported).
#ifndef CKPTSCAN_CORE_TORCH_CODE_NAMES_H_
#define CKPTSCAN_CORE_TORCH_CODE_NAMES_H_

#include <string_view>

namespace ckptscan::torch {

// The first component of a dotted name ("os" of "os.path.join").
std::string_view TopModule(std::string_view dotted);

// Modules whose objects run code, load code or touch the system (os, subprocess, builtins,
// importlib, pickle, ctypes, socket, ...: the pickle denylist's families).
bool IsSystemModule(std::string_view module);

// Frameworks and helpers whose objects can load other files or call what they are given
// (torch, numpy, joblib, tensorflow, jax, functools, operator, IPython): a Keras config never
// names them; a Hydra config names their classes all the time (torch.optim.Adam).
bool IsFrameworkModule(std::string_view module);

// Whether hydra.utils.instantiate (hydra._internal.utils._locate: import the first component,
// then getattr or import each next one) on `target` reaches code that runs code, imports by
// name, loads other files or touches the system: a system module at any component
// (logging.os.system reaches os through an attribute), a dunder component (__builtins__,
// __globals__), a function that evaluates, imports or shells out whatever its module (eval,
// exec, getattr, system, import_module, ...), or a framework loader (torch.load, torch.hub,
// numpy.load, yaml.unsafe_load, hydra.utils.instantiate, ...; a model loader by method name:
// from_pretrained, load_from_checkpoint, ...), or a value OmegaConf interpolates ("${...}":
// the callable is decided at load time).
bool TargetRunsCode(std::string_view target);

// transformers' get_class_from_dynamic_module takes "org/repo--module.Class" as code in
// another Hub repository: "org/repo" for such a reference, "" for the repository's own code.
std::string_view HubRepoOf(std::string_view class_reference);

// A model reference that is a path on the machine rather than a Hub id ("org/name"): absolute
// (/x, \x, C:\x), starting with ~ or ./, or with a "." or ".." component.
bool IsLocalModelPath(std::string_view reference);

// Why a loader's path (a modules.json "path", a PEFT base model) reaches what a repository scan
// never reads: "" when it stays inside; otherwise "absolute", "outside the folder" (a ".."
// component) or "in a .git folder" (the walk skips .git at every depth).
std::string_view UnscannedPath(std::string_view path);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_CODE_NAMES_H_
