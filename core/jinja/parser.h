// Jinja's parser (jinja2/parser.py, 3.1.2 and 3.1.6) and the checks its compiler makes before
// a template renders (jinja2/compiler.py), for the environments that render chat templates:
// transformers' (ImmutableSandboxedEnvironment with the loopcontrols extension and its
// {% generation %} tag) and a plain Environment (which has neither: a template using them is
// refused there, read here). Where the two Jinja releases differ, a template either accepts
// is read.
//
// Grammar: statements for, if/elif/else, set (with namespace attributes, tuples and blocks),
// macro, call, filter, with, block, extends, include, import, from-import, print,
// autoescape, raw, break, continue, generation; expressions with Jinja's precedence
// (conditional, or, and, not, comparisons and in, + -, ~, * / // %, **, unary, filters and
// tests, subscripts, slices, calls with keyword, *args and **kwargs arguments, literals).
// Compile-time refusals reproduced: unknown filters and tests outside {% if %} and inline
// if-expressions, a non-default parameter after a default one, `caller` taken as a parameter
// without a default by a macro that uses it, assigning to `loop` in a for loop, a keyword
// argument or parameter given twice, break/continue outside a loop, extends inside a block,
// loop or macro, a block defined twice, more than 20 loops nested in one function.
//
// Explicit stacks throughout (no recursion on the template's depth), under Limits: max_nodes,
// max_nesting (blocks open and expression depth).
//
// A parser of untrusted bytes: worker side only. Thread-safe: pure function.
#ifndef CKPTSCAN_CORE_JINJA_PARSER_H_
#define CKPTSCAN_CORE_JINJA_PARSER_H_

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/jinja/ast.h"
#include "core/jinja/lexer.h"
#include "core/jinja/limits.h"

namespace ckptscan::jinja {

struct Parsed {
  Tree tree;                      // complete only when `problem` is unset
  std::optional<Problem> problem;  // Jinja refuses the template (or it is not modelled)
};

// Lexes and parses `text`. Non-OK only past a limit.
absl::StatusOr<Parsed> Parse(std::string_view text, const Limits& limits);

// Jinja's built-in filters and tests (3.1.2 and 3.1.6 have the same ones).
bool IsBuiltinFilter(std::string_view name);
bool IsBuiltinTest(std::string_view name);

}  // namespace ckptscan::jinja

#endif  // CKPTSCAN_CORE_JINJA_PARSER_H_
