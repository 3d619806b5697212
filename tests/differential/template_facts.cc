// template_facts: what the scanner's template reader makes of templates, one JSON object per
// line, for tests/differential/template_diff.py.
//
//   template_facts < requests      (one {"id": N, "template": TEXT} per line)
//
// {"id": N, "parse": {"ok": bool, "message": ..., "offset": N, "unsupported": bool},
//  "envs": {"plain": VERDICT, "sandbox": VERDICT},  (VERDICT: SAFE, SUSPICIOUS, DANGEROUS)
//  "names": [every constant attribute or item name judged], "unresolved": bool,
//  "findings": [[offset, construct, "dangerous"|"suspicious", envs bits, message], ...]}
// or {"id": N, "limit": MESSAGE} when a limit stopped the reading.
//
// The verdicts come from the same reader the scanner runs (content::CheckChatTemplate), the
// names from the evaluation behind it (jinja::Analyze).
#include <iostream>
#include <string>

#include "core/content/template_check.h"
#include "core/jinja/analyzer.h"
#include "core/jinja/parser.h"
#include "nlohmann/json.hpp"

namespace {

using ckptscan::jinja::Severity;

nlohmann::json Facts(const std::string& text) {
  nlohmann::json out;
  const ckptscan::jinja::Limits limits;
  absl::StatusOr<ckptscan::jinja::Parsed> parsed = ckptscan::jinja::Parse(text, limits);
  if (!parsed.ok()) {
    out["limit"] = std::string(parsed.status().message());
    return out;
  }
  if (parsed->problem.has_value()) {
    out["parse"] = {{"ok", false},
                    {"message", parsed->problem->message},
                    {"offset", parsed->problem->offset},
                    {"unsupported", parsed->problem->unsupported}};
    return out;
  }
  out["parse"] = {{"ok", true}};
  absl::StatusOr<ckptscan::jinja::Analysis> a =
      ckptscan::jinja::Analyze(text, parsed->tree, limits);
  if (!a.ok()) {
    out["limit"] = std::string(a.status().message());
    return out;
  }
  std::string plain = "SAFE", sandbox = "SAFE";
  nlohmann::json findings = nlohmann::json::array();
  for (const ckptscan::jinja::Finding& f : a->findings) {
    const std::string level = f.severity == Severity::kDangerous ? "DANGEROUS" : "SUSPICIOUS";
    const auto worse = [&](std::string* v) {
      if (*v != "DANGEROUS") *v = level;
    };
    if (f.envs & ckptscan::jinja::kPlainEnv) worse(&plain);
    if (f.envs & ckptscan::jinja::kSandboxEnv) worse(&sandbox);
    findings.push_back({f.offset, f.construct,
                        f.severity == Severity::kDangerous ? "dangerous" : "suspicious", f.envs,
                        f.message});
  }
  // The scanner's own reading must give the same verdict (the hits' rules).
  const ckptscan::content::TemplateCheck check =
      ckptscan::content::CheckChatTemplate(text, ckptscan::content::TemplateLimits{});
  std::string scan = "SAFE";
  for (const ckptscan::content::TemplateHit& h : check.hits) {
    if (h.rule == ckptscan::content::kTemplateEscape) {
      scan = "DANGEROUS";
    } else if (scan == "SAFE") {
      scan = "SUSPICIOUS";
    }
  }
  out["scan"] = scan;
  out["envs"] = {{"plain", plain}, {"sandbox", sandbox}};
  out["names"] = a->names;
  out["unresolved"] = a->unresolved;
  out["findings"] = std::move(findings);
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json in = nlohmann::json::parse(line);
    nlohmann::json out = Facts(in.at("template").get<std::string>());
    out["id"] = in.at("id");
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
