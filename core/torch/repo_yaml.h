// What a repository's YAML files (*.yaml, *.yml: Hydra and NeMo configs, training recipes) make
// their loaders build: the tags PyYAML resolves (yaml.unsafe_load, yaml.load with Loader=Loader
// or UnsafeLoader, their libyaml twins, build a Python object for every
// tag:yaml.org,2002:python/... tag: python/object/apply:os.system calls os.system), and the
// `_target_` keys hydra.utils.instantiate imports and calls.
//
// Hand-written, not a YAML parser: only tags, %TAG directives and keys are needed, and the scan
// must over-approximate what PyYAML (and libyaml) would read, which a parser that stops at the
// first error does not do; Debian's libyaml would also add a setup dependency. The scan follows
// PyYAML's scanner token by token (yaml/scanner.py of PyYAML 6: block indentation, flow
// levels, simple keys, plain, quoted and block scalars, comments, the five line breaks
// including NEL, LS and PS), without its errors: where PyYAML would stop, the scan goes on,
// and where PyYAML and libyaml differ, it follows the one that reads on. Over-approximations,
// each of which can only add a finding:
//   - a '!' that begins a word inside a plain scalar counts as a tag;
//   - a tag handle is resolved under every binding the file gives it (the defaults and every
//     %TAG for it, whichever document they belong to); a handle no %TAG defines is reported;
//   - a tag URI that is cut short (a bad escape, no closing '>') is judged as far as it goes;
//   - every `_target_` value is kept, a repeated one too.
// What the tags resolve to is percent-decoded as PyYAML decodes it (`!!%70ython/...` is
// python/). A `_target_` key is found in every spelling PyYAML reads as that key: plain, single-
// or double-quoted with escapes, in block or flow mappings, after '?' or through an alias; its
// value likewise (a block scalar, a value on the next line, an alias of an anchored scalar).
//
// Linear time, no recursion; block indentation and flow nesting are kept on explicit stacks
// bounded by YamlLimits::max_nesting, and every list by a named limit.
//
// Worker side (the file is untrusted bytes). Thread-safe: a pure function.
#ifndef CKPTSCAN_CORE_TORCH_REPO_YAML_H_
#define CKPTSCAN_CORE_TORCH_REPO_YAML_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ckptscan::torch {

struct YamlLimits {
  uint64_t max_bytes = 64ull << 20;   // the file (over it: a limit error, nothing read)
  uint64_t max_nesting = 10000;       // block indentation levels and flow nesting
  uint64_t max_tags = 64;             // distinct reported tags kept (the rest counted)
  uint64_t max_targets = 64;          // `_target_` values kept (the rest counted)
  uint64_t max_tag_directives = 256;  // %TAG directives in the file
  uint64_t max_anchors = 4096;        // anchored scalars remembered for aliases
  uint64_t max_scalar_bytes = 4096;   // of a key, a `_target_` value or a tag kept (cut after)
};

// A tag that resolves to something other than a standard YAML 1.1 type (str, int, float, bool,
// null, map, seq, binary, timestamp, set, omap, pairs, merge, value under tag:yaml.org,2002:)
// or the non-specific "!".
struct YamlTag {
  std::string written;   // as written, "!!python/object/apply:os.system" (cut at
                         // max_scalar_bytes)
  std::string resolved;  // what it resolves to ("tag:yaml.org,2002:python/object/apply:
                         // os.system"); the python/ one when bindings differ; "" when the
                         // handle has no binding
  bool python = false;   // resolves to tag:yaml.org,2002:python/...
  uint64_t offset = 0;   // its first '!' (the first time it occurs)
  uint64_t line = 0;     // 1-based
  uint64_t count = 0;    // occurrences
};

struct YamlTarget {
  std::string value;    // decoded; "*name" for an alias of no anchored scalar
  uint64_t offset = 0;  // the value's first byte (the key's, for an unresolved alias)
  uint64_t line = 0;    // 1-based
};

struct YamlScan {
  // Distinct tags by what they resolve to, in order of first occurrence; at most max_tags.
  std::vector<YamlTag> tags;
  uint64_t more_tags = 0;    // occurrences of tags not kept
  bool more_python = false;  // one of them is a python/ tag
  std::vector<YamlTarget> targets;
  uint64_t more_targets = 0;       // `_target_` values not kept
  uint64_t more_code_targets = 0;  // of those, the TargetRunsCode ones (core/torch/code_names.h)
  // Not OK when a limit stopped the scan (a base::LimitError naming it, at error_offset):
  // what was found before it is kept, the rest not read.
  absl::Status status;
  uint64_t error_offset = 0;
};

// `text`: the file's bytes (UTF-8, an optional BOM).
YamlScan ScanYaml(std::string_view text, const YamlLimits& limits);

// Whether a file name is a YAML file's (*.yaml, *.yml).
bool IsYamlName(std::string_view file_name);

}  // namespace ckptscan::torch

#endif  // CKPTSCAN_CORE_TORCH_REPO_YAML_H_
