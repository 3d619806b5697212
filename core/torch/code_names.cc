#include "core/torch/code_names.h"

#include <span>
#include <string_view>

namespace ckptscan::torch {
namespace {

// Modules that run code, load code or touch the system, reached under any name: a config that
// names one at any component of a dotted path gets there (logging.os is os).
constexpr std::string_view kSystemModules[] = {
    "os",        "posix",   "nt",     "subprocess", "builtins", "__builtin__", "sys",
    "importlib", "runpy",   "codeop", "pty",        "shutil",   "socket",      "pickle",
    "_pickle",   "cPickle", "dill",   "marshal",    "ctypes"};

// The same families under names that are also common names of a project's own submodules
// (mypkg.code, mypkg.types): judged as the top module only.
constexpr std::string_view kSystemTopModules[] = {"code",       "types",    "multiprocessing",
                                                  "webbrowser", "platform", "requests",
                                                  "urllib",     "http",     "asyncio"};

constexpr std::string_view kFrameworkModules[] = {"functools", "operator",   "torch", "numpy",
                                                  "joblib",    "tensorflow", "jax",   "IPython"};

// Functions that evaluate, import, look up or shell out, whatever module they come from.
constexpr std::string_view kCodeCallables[] = {
    "eval",  "exec",          "execfile",    "compile",    "getattr",  "system",
    "popen", "import_module", "load_inline", "breakpoint", "run_path", "run_module",
    // Model loaders by method name: another model's files (pickles under torch.load, remote
    // code under trust_remote_code), whatever the class (AutoModelForCausalLM, Lightning's
    // load_from_checkpoint, diffusers' from_single_file, NeMo's restore_from).
    "from_pretrained", "load_from_checkpoint", "from_single_file", "restore_from", "read_pickle"};

// Loaders that read another file (a pickle, a YAML document with python tags), fetch and run
// remote code, or instantiate another config: a target equal to one or below it.
constexpr std::string_view kLoaderTargets[] = {"torch.load",
                                               "torch.hub",
                                               "torch.jit.load",
                                               "torch.package",
                                               "torch.utils.cpp_extension",
                                               "torch.ops.load_library",
                                               "torch.classes.load_library",
                                               "numpy.load",
                                               "joblib.load",
                                               "yaml.load",
                                               "yaml.unsafe_load",
                                               "yaml.full_load",
                                               "yaml.load_all",
                                               "yaml.unsafe_load_all",
                                               "yaml.full_load_all",
                                               "hydra.utils",
                                               "hydra._internal",
                                               "pydoc.locate",
                                               "pkgutil.resolve_name",
                                               "transformers.dynamic_module_utils",
                                               "keras.models.load_model",
                                               "keras.saving.load_model",
                                               "tensorflow.keras.models.load_model",
                                               "pandas.io.pickle",
                                               "transformers.pipeline",
                                               "transformers.pipelines.pipeline"};

bool In(std::string_view s, std::span<const std::string_view> list) {
  for (std::string_view x : list) {
    if (s == x) return true;
  }
  return false;
}

bool IsDunder(std::string_view s) {
  return s.size() >= 4 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
}

// `dotted` is `prefix` or starts with `prefix` followed by '.'.
bool AtOrBelow(std::string_view dotted, std::string_view prefix) {
  return dotted.substr(0, prefix.size()) == prefix &&
         (dotted.size() == prefix.size() || dotted[prefix.size()] == '.');
}

}  // namespace

std::string_view TopModule(std::string_view dotted) { return dotted.substr(0, dotted.find('.')); }

bool IsSystemModule(std::string_view module) {
  const std::string_view top = TopModule(module);
  return In(top, kSystemModules) || In(top, kSystemTopModules);
}

bool IsFrameworkModule(std::string_view module) { return In(TopModule(module), kFrameworkModules); }

bool TargetRunsCode(std::string_view target) {
  if (IsSystemModule(target)) return true;
  // OmegaConf resolves "${...}" (an interpolation, a resolver such as oc.select or oc.decode)
  // when Hydra reads the value: the callable is decided at load time, so it may be any.
  if (target.find("${") != std::string_view::npos) return true;
  for (std::string_view prefix : kLoaderTargets) {
    if (AtOrBelow(target, prefix)) return true;
  }
  std::string_view rest = target;
  while (true) {
    const size_t dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    if (In(part, kSystemModules) || IsDunder(part)) return true;
    if (dot == std::string_view::npos) return In(part, kCodeCallables);
    rest.remove_prefix(dot + 1);
  }
}

std::string_view HubRepoOf(std::string_view class_reference) {
  const size_t sep = class_reference.find("--");
  return sep == std::string_view::npos ? std::string_view() : class_reference.substr(0, sep);
}

std::string_view UnscannedPath(std::string_view path) {
  if (path.empty()) return "";
  if (path[0] == '/' || path[0] == '\\' || path[0] == '~' ||
      (path.size() >= 2 && path[1] == ':')) {
    return "absolute";
  }
  std::string_view rest = path;
  while (true) {
    const size_t sep = rest.find_first_of("/\\");
    const std::string_view part = rest.substr(0, sep);
    if (part == "..") return "outside the folder";
    if (part == ".git") return "in a .git folder";
    if (sep == std::string_view::npos) return "";
    rest.remove_prefix(sep + 1);
  }
}

bool IsLocalModelPath(std::string_view reference) {
  if (reference.empty()) return false;
  const char first = reference[0];
  // ".git", ".cache/x": a hidden folder is no Hub id (a repository name never starts with '.').
  if (first == '.') return true;
  if (first == '/' || first == '\\' || first == '~') return true;
  // A Windows drive (C:\x, C:/x).
  if (reference.size() >= 2 && reference[1] == ':' &&
      ((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z'))) {
    return true;
  }
  std::string_view rest = reference;
  while (true) {
    const size_t sep = rest.find_first_of("/\\");
    const std::string_view part = rest.substr(0, sep);
    if (part == "." || part == "..") return true;
    if (sep == std::string_view::npos) return false;
    rest.remove_prefix(sep + 1);
  }
}

}  // namespace ckptscan::torch
