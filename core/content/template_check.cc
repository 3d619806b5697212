#include "core/content/template_check.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/escape.h"
#include "core/jinja/analyzer.h"
#include "core/jinja/parser.h"

namespace ckptscan::content {
namespace {

std::string Envs(uint8_t envs) {
  const bool plain = (envs & jinja::kPlainEnv) != 0;
  const bool sandbox = (envs & jinja::kSandboxEnv) != 0;
  if (plain && sandbox) return "[plain Environment and transformers' sandbox] ";
  if (plain) return "[plain Environment, as llama-cpp-python < 0.2.72 renders] ";
  return "[transformers' sandbox] ";
}

std::string Escaped(std::string_view s) {
  std::string out;
  base::AppendEscaped(&out, s, {.escape_invisible = true});
  return out;
}

}  // namespace

TemplateCheck CheckChatTemplate(std::string_view text, const TemplateLimits& limits) {
  TemplateCheck out;
  jinja::Limits reader = limits.reader;
  reader.max_template_bytes = limits.max_template_bytes;
  std::vector<TemplateHit> hits;
  absl::StatusOr<jinja::Parsed> parsed = jinja::Parse(text, reader);
  if (!parsed.ok()) {
    out.status = parsed.status();
    return out;
  }
  if (parsed->problem.has_value()) {
    const jinja::Problem& p = *parsed->problem;
    TemplateHit h;
    h.offset = std::min<uint64_t>(p.offset, text.empty() ? 0 : text.size() - 1);
    h.construct = p.unsupported ? "unsupported" : "syntax";
    h.rule = p.unsupported ? std::string(kTemplateUnverified) : std::string(kTemplateSyntax);
    h.message = p.unsupported
                    ? absl::StrCat("not read: ", Escaped(p.message),
                                   " (this reader does not model it; the template is not judged)")
                    : absl::StrCat("Jinja refuses the template: ", Escaped(p.message),
                                   " (no loader renders it; nothing else in it is judged)");
    hits.push_back(std::move(h));
  } else {
    absl::StatusOr<jinja::Analysis> a = jinja::Analyze(text, parsed->tree, reader);
    if (!a.ok()) {
      out.status = a.status();
      return out;
    }
    for (const jinja::Finding& f : a->findings) {
      TemplateHit h;
      h.offset = std::min<uint64_t>(f.offset, text.empty() ? 0 : text.size() - 1);
      h.construct = f.construct;
      h.rule = f.severity == jinja::Severity::kDangerous ? std::string(kTemplateEscape)
                                                          : std::string(kTemplateUnverified);
      // Names in a finding come from the template as written (an attribute spelled with \x0f is
      // the name with that byte): escape what a terminal would act on, keep what is escaped.
      h.message = Envs(f.envs);
      base::AppendEscaped(&h.message, f.message,
                          {.escape_backslash = false, .escape_invisible = true});
      hits.push_back(std::move(h));
    }
  }
  // Past max_hits, the DANGEROUS hits are the ones kept; what is kept is in text order.
  const auto rank = [](const TemplateHit& h) { return h.rule == kTemplateEscape ? 0 : 1; };
  std::stable_sort(hits.begin(), hits.end(), [&](const TemplateHit& a, const TemplateHit& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a.offset < b.offset;
  });
  for (TemplateHit& h : hits) {
    if (out.hits.size() >= limits.max_hits) {
      ++out.more_hits;
      if (out.more_rule.empty() || rank(h) < (out.more_rule == kTemplateEscape ? 0 : 1)) {
        out.more_rule = h.rule;
      }
    } else {
      out.hits.push_back(std::move(h));
    }
  }
  std::stable_sort(out.hits.begin(), out.hits.end(),
                   [](const TemplateHit& a, const TemplateHit& b) { return a.offset < b.offset; });
  return out;
}

}  // namespace ckptscan::content
