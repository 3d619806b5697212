// Abstract evaluation of a parsed chat template (core/jinja/parser.h): runs the template over
// abstract values (core/jinja/values.h) the way Jinja would render it for any conversation,
// and judges every attribute and item it reaches, every filter, test and function it calls.
//
// The render context is what the loaders pass: `messages`, `tools`, `documents` and every other
// variable the template does not set are JSON data (or undefined); `bos_token`, `eos_token` and
// the other special tokens are text from the model's own files; the globals are Jinja's
// (range, dict, namespace, lipsum, cycler, joiner) and those transformers and llama-cpp-python
// add (raise_exception, strftime_now).
//
// Strings are folded through set, set blocks, macro output and parameter defaults, with, for
// over constant sequences (unrolled one iteration at a time), namespaces, filters (replace,
// join, first, last, lower, upper, format, reverse, string, list, map, trim...), string methods,
// ~ + * %, slicing and subscripts, so that a name built from pieces is judged by its value.
// Loops over data are evaluated to a fixpoint, both branches of every if are taken, every
// macro is evaluated at each call with its arguments (and once with its defaults when it is
// never called).
//
// Judged for two environments (Env): a plain jinja2.Environment (llama-cpp-python before
// 0.2.72, and any tool rendering without the sandbox), where `x.name` and `x[name]` fall back to
// each other and reach any Python attribute; and transformers' ImmutableSandboxedEnvironment,
// which blocks names starting with "_" and Python internals, and whose own escapes go through
// str.format (CVE-2024-56326: a stored reference to a string's format method, jinja2 < 3.1.5;
// CVE-2025-27516: |attr('format'), jinja2 3.1.5). CVE-2024-56201 needs the template's file name,
// which from_string never has: no chat template reaches it.
//
// A template is SAFE for an environment only when every access is to data of known type by a
// constant name that stays in data (a string method that cannot reach code: format and
// format_map are not), and every call is a Jinja filter or test, a global above, a data method,
// a macro or caller of the template. Otherwise a Finding: DANGEROUS where the construct reaches
// Python internals or str.format, or names an attribute by a string the template builds or the
// model's files hold; SUSPICIOUS where it is merely unknown (an unknown filter, a name taken
// from the user's data, a value of unknown type).
//
// Explicit stacks (no recursion on the template's depth), under Limits: max_eval_steps,
// max_call_depth (errors), max_loop_unroll and max_string_bytes (past them values are summarised,
// never dropped).
//
// A reader of untrusted bytes: worker side only. Thread-safe: pure function.
#ifndef CKPTSCAN_CORE_JINJA_ANALYZER_H_
#define CKPTSCAN_CORE_JINJA_ANALYZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jinja/ast.h"
#include "core/jinja/limits.h"

namespace ckptscan::jinja {

enum Env : uint8_t {
  kPlainEnv = 1,    // jinja2.Environment
  kSandboxEnv = 2,  // jinja2.sandbox.ImmutableSandboxedEnvironment (transformers)
};

enum class Severity : uint8_t { kSuspicious, kDangerous };

struct Finding {
  uint32_t offset = 0;   // byte offset in the template
  uint8_t envs = 0;      // Env bits: the environments this finding concerns
  Severity severity = Severity::kSuspicious;
  std::string construct;  // one of kConstructs
  std::string message;    // what was reached and the expression's text (escaped, short)
};

// Every construct id a Finding carries (docs/templates.md lists them).
inline constexpr const char* kConstructs[] = {
    "private_name",   // a name starting with "_" (dunders, name-mangled internals)
    "format_method",  // str.format / str.format_map reached
    "code_attribute", // an attribute of a function, class or runtime object outside data
    "built_name",     // an attribute or item named by a string the template builds or the
                      // model's files hold, not folded to a constant
    "data_name",      // an attribute or item named by the user's data
    "unknown_value",  // an attribute, item or call of a value of unknown type
    "unknown_filter", // a filter Jinja does not have
    "unknown_test",   // a test Jinja does not have
    "template_load",  // include, import, from-import, extends: another template
};

struct Analysis {
  std::vector<Finding> findings;  // in template order, one per construct, offset and severity
  std::vector<std::string> names; // every constant attribute or item name judged (sorted)
  bool unresolved = false;        // some attribute or item name was not a constant
};

// Non-OK only past max_eval_steps or max_call_depth (ResourceExhausted naming the limit).
absl::StatusOr<Analysis> Analyze(std::string_view text, const Tree& tree, const Limits& limits);

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_ANALYZER_H_
