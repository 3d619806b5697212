// Chat templates (Jinja2 source, as transformers renders `chat_template` from
// tokenizer_config.json or chat_template.jinja, and llama.cpp-based loaders render the GGUF
// key tokenizer.chat_template): constructs that a template has no business using and that
// sandbox escapes are made of.
//
// A heuristic, not a Jinja parser (docs/formats.md, "Chat templates"): it reads the text once,
// finds the Jinja blocks ({{ }}, {% %}, and line statements are not supported) and reports
// every construct of the catalogue below inside them. A template without a hit is not proven
// harmless; a hit is what benign templates do not contain.
//
// A parser of untrusted bytes: worker side only. Linear time, no recursion.
// Thread-safe: pure functions.
#ifndef CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_
#define CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckptscan::content {

struct TemplateLimits {
  uint64_t max_template_bytes = 4ull << 20;  // one template (over it: the caller reports a limit)
  uint64_t max_hits = 64;                    // hits kept per template (the rest are counted)
};

struct TemplateHit {
  uint64_t offset = 0;    // byte offset of the construct in the template text
  std::string construct;  // stable id, one of kTemplateConstructs
  std::string message;    // what was found, quoted (terminal-safe, at most ~80 bytes of it)
};

// Every construct id the checker reports, in the order docs/formats.md lists them. A hit's
// `construct` is always one of these (template_check_test and the content fuzz target hold it).
inline constexpr std::string_view kTemplateConstructs[] = {
    "dunder",       "attr_filter", "global_attribute", "import",       "escape",
    "format_build", "built_name",  "string_index",     "computed_key", "unbalanced"};

struct TemplateCheck {
  std::vector<TemplateHit> hits;  // in text order, at most max_hits
  uint64_t more_hits = 0;         // hits past max_hits
};

TemplateCheck CheckChatTemplate(std::string_view text, const TemplateLimits& limits);

}  // namespace ckptscan::content

#endif  // CKPTSCAN_CORE_CONTENT_TEMPLATE_CHECK_H_
