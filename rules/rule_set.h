// RuleSet: the compiled, immutable policy that turns VM facts into findings and a verdict.
//
// SAFE is decided only by the exact-name allowlist and the call shapes it allows
// (proto/ckptscan/v1/rules.proto). Denylist categories grade non-allowlisted globals as
// DANGEROUS or SUSPICIOUS and explain them; they never make anything SAFE.
//
// Thread-safe: a RuleSet is immutable after Create; share it with std::shared_ptr.
#ifndef CKPTSCAN_RULES_RULE_SET_H_
#define CKPTSCAN_RULES_RULE_SET_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckptscan/v1/report.pb.h"
#include "ckptscan/v1/rules.pb.h"
#include "core/pickle/facts.h"

namespace ckptscan::rules {

struct Evaluation {
  std::vector<v1::Finding> findings;
  // Worst verdict implied by the findings alone: SAFE when there are none. Errors (VmError)
  // are not the rule set's business; the caller combines them (findings win over errors).
  v1::Verdict verdict = v1::VERDICT_SAFE;
};

class RuleSet final {
 public:
  // Parses and validates a text-format ckptscan.v1.RuleSet. `origin` names it in errors.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> FromTextProto(std::string_view text,
                                                                      std::string_view origin);
  static absl::StatusOr<std::shared_ptr<const RuleSet>> FromFile(const std::string& path);
  // The rules compiled into the binary (rules/default_rules.textproto).
  static std::shared_ptr<const RuleSet> Default();

  const std::string& version() const;
  const v1::RuleSet& proto() const;

  // Findings for every pickle of a stream (nested ones included). `member` is copied into
  // each finding's location.
  Evaluation Evaluate(const pickle::StreamFacts& facts, std::string_view member) const;

  ~RuleSet();
  RuleSet(const RuleSet&) = delete;
  RuleSet& operator=(const RuleSet&) = delete;

 private:
  struct Impl;
  explicit RuleSet(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Worst-of for verdicts: DANGEROUS > SUSPICIOUS > ERROR > SAFE (findings win over errors).
v1::Verdict WorseVerdict(v1::Verdict a, v1::Verdict b);

}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_RULE_SET_H_
