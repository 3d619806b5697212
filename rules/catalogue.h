// The catalogue of rule ids a finding can carry: stable ids, titles and help text, used by the
// report formatters (SARIF rule metadata) and docs/rules.md. Every id the RuleSet emits is here.
#ifndef CKPTSCAN_RULES_CATALOGUE_H_
#define CKPTSCAN_RULES_CATALOGUE_H_

#include <string_view>
#include <vector>

#include "ckptscan/v1/report.pb.h"

namespace ckptscan::rules {

struct RuleInfo {
  std::string_view id;     // e.g. "global.denied.shell"
  std::string_view title;  // one line
  std::string_view help;   // a short paragraph: what it means, what to do
  v1::Verdict verdict;     // the verdict a finding of this rule implies by default
  v1::Severity severity;
};

const std::vector<RuleInfo>& Catalogue();
// nullptr when unknown.
const RuleInfo* FindRule(std::string_view id);

}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_CATALOGUE_H_
