// Chat templates (Jinja2 source, as transformers renders `chat_template` from
// tokenizer_config.json or chat_template.jinja, and llama.cpp-based loaders render the GGUF
// key tokenizer.chat_template): read by Jinja's grammar and judged by abstract evaluation
// (core/jinja/: parser.h reads the template as jinja2 3.1 reads it, analyzer.h follows every
// value it computes and judges every attribute, item, filter, test and call), for the two
// environments templates are rendered in: a plain jinja2.Environment (llama-cpp-python before
// 0.2.72) and transformers' ImmutableSandboxedEnvironment.
//
// A template without hits is SAFE for both environments: every access is to data of known
// type by a constant name, every call a Jinja built-in, a global the loaders provide, a data
// method, or the template's own macro. docs/templates.md lists the hits.
//
// A reader of untrusted bytes: worker side only. No recursion on the template's depth.
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_
#define CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/jinja/limits.h"

namespace ckptscan::content {

struct TemplateLimits {
  uint64_t max_template_bytes = 4ull << 20;  // one template (over it: the caller reports a limit)
  uint64_t max_hits = 64;                    // hits kept per template (the rest are counted)
  jinja::Limits reader;  // the reader's own limits (its max_template_bytes is the one above)
};

// The rule a hit is reported under (template.<rule>): what it means for the verdict.
inline constexpr std::string_view kTemplateEscape = "sandbox_escape";  // DANGEROUS
inline constexpr std::string_view kTemplateUnverified = "unverified";  // SUSPICIOUS
inline constexpr std::string_view kTemplateSyntax = "syntax";          // SUSPICIOUS

struct TemplateHit {
  uint64_t offset = 0;    // byte offset of the construct in the template text
  std::string construct;  // stable id, one of kTemplateConstructs
  std::string rule;       // kTemplateEscape, kTemplateUnverified or kTemplateSyntax
  std::string message;    // the environments it concerns, what was found, the expression
                          // quoted (terminal-safe, at most ~60 bytes of it)
};

// Every construct id the checker reports, listed in docs/templates.md. A hit's
// `construct` is always one of these (template_check_test and the content fuzz target hold it).
inline constexpr std::string_view kTemplateConstructs[] = {
    "private_name", "format_method",  "code_attribute", "built_name",    "data_name",
    "unknown_value", "unknown_filter", "unknown_test",  "template_load", "syntax",
    "unsupported"};

struct TemplateCheck {
  std::vector<TemplateHit> hits;  // in text order, at most max_hits
  uint64_t more_hits = 0;         // hits past max_hits (the DANGEROUS ones are kept first)
  std::string more_rule;          // the worst rule among those past max_hits
  // Not OK when the reading stopped at a limit (ResourceExhausted naming it): the template is
  // not judged, and is never SAFE.
  absl::Status status;
};

TemplateCheck CheckChatTemplate(std::string_view text, const TemplateLimits& limits);

}  // namespace ckptscan::content

#endif  // CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_
