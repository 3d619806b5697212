// Internal to ckpt_rules: read-only helpers over VM facts that the rules do not trust.
//
// Facts cross a process boundary (the worker builds them), so every id is checked before use
// (NodeAt, FindInconsistency) and every string that goes into a finding is made valid,
// single-line UTF-8 (protobuf string fields and JSON output require it).
#ifndef CKPTSCAN_RULES_FACTS_VIEW_H_
#define CKPTSCAN_RULES_FACTS_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/pickle/facts.h"
#include "core/pickle/graph_check.h"

namespace ckptscan::rules::internal {

inline constexpr size_t kMaxShownName = 256;  // bytes of a module or qualname shown in text
inline constexpr size_t kMaxCallChars = 200;  // Finding.call

// The node, or nullptr when `id` is kNoNode or out of range.
const pickle::Node* NodeAt(const pickle::Graph& g, pickle::NodeId id);

// The first id in `g` that refers to nothing (core/pickle/graph_check.h), shared with the
// trusted side's facts decoder (sandbox/facts_decoder.h).
using pickle::FindInconsistency;

// Appends `s` as valid UTF-8 on one line: well-formed sequences are copied; control
// characters and malformed bytes (lone surrogates, overlongs, truncated sequences) become
// \n, \t, \xNN escapes, and backslashes \\ unless `escape_backslash` is false (for text
// that is already escaped, such as pickle::SummarizeCall's).
void AppendSanitized(std::string* out, std::string_view s, bool escape_backslash = true);
// Sanitized after cutting to `max_bytes` ("…" appended when cut).
std::string Sanitized(std::string_view s, size_t max_bytes, bool escape_backslash = true);

// Sanitized and cut to kMaxShownName bytes.
std::string ShownName(std::string_view s);
// "module.qualname" (resolved names) for display.
std::string GlobalName(const pickle::GlobalRef& ref);
// "<computed module.?>" for a Via::kDynamic global: the parts computed at load time as '?'.
std::string DynamicGlobalName(const pickle::GlobalRef& ref);
// The same for a kGlobal node ("<ext N>" for EXT); "" if the node is not a valid kGlobal.
std::string GlobalName(const pickle::Graph& g, const pickle::Node& n);

// pickle::OpName, or "0x??" for a byte that is no opcode.
std::string OpcodeName(uint8_t op);

}  // namespace ckptscan::rules::internal

#endif  // CKPTSCAN_RULES_FACTS_VIEW_H_
