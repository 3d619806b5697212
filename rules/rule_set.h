// RuleSet: the compiled, immutable policy that turns VM facts into findings and a verdict.
//
// SAFE is decided only by the exact-name allowlist and the call shapes it allows
// (proto/ckptscan/v1/rules.proto). Denylist categories grade non-allowlisted globals as
// DANGEROUS or SUSPICIOUS and explain them; they never make anything SAFE.
//
// Thread-safe: a RuleSet is immutable after Create; share it with std::shared_ptr.
#ifndef CKPTSCAN_RULES_RULE_SET_H_
#define CKPTSCAN_RULES_RULE_SET_H_

#include <cstddef>
#include <functional>
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
  // Limits (named, so reports and docs can cite them).
  // A rules text larger than this is refused (ResourceExhausted).
  static constexpr size_t kMaxRulesBytes = 16u << 20;
  // Findings kept per Evaluate call; the rest only count towards the verdict and are summarised
  // by one "scan.findings_truncated" finding.
  static constexpr size_t kMaxFindings = 10'000;
  // A module or qualname longer than this is not graded against the lists (it is reported as
  // unlisted), which bounds the work per global.
  static constexpr size_t kMaxGradedNameBytes = 512;

  // Renders a call site for Finding.call (one bounded line). The default is
  // pickle::SummarizeCall, the rendering `ckptscan disasm` shows.
  using CallSummarizer = std::function<std::string(const pickle::Graph&, const pickle::CallSite&)>;

  // Parses and validates a text-format ckptscan.v1.RuleSet. `origin` names it in errors.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> FromTextProto(std::string_view text,
                                                                      std::string_view origin);
  static absl::StatusOr<std::shared_ptr<const RuleSet>> FromFile(const std::string& path);
  // A binary-encoded ckptscan.v1.RuleSet, validated exactly as FromTextProto validates.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> FromBinaryProto(std::string_view bytes,
                                                                        std::string_view origin);
  // The rules compiled into the binary (rules/default_rules.textproto).
  static std::shared_ptr<const RuleSet> Default();

  const std::string& version() const;
  const v1::RuleSet& proto() const;

  // Findings for every pickle of a stream (nested ones included), in stream order per pickle,
  // pickles in the order of facts.pickles, trailing bytes last. `member` is copied into each
  // finding's location. Facts are not trusted: ids out of range yield a "scan.error" finding,
  // never a crash. Finding.call is pickle::SummarizeCall's rendering of the call site.
  Evaluation Evaluate(const pickle::StreamFacts& facts, std::string_view member) const;
  // The same, rendering Finding.call with `summarize` (its output is still cut and made valid
  // UTF-8; it is not called for a pickle whose facts are inconsistent).
  Evaluation Evaluate(const pickle::StreamFacts& facts, std::string_view member,
                      const CallSummarizer& summarize) const;

  ~RuleSet();
  RuleSet(const RuleSet&) = delete;
  RuleSet& operator=(const RuleSet&) = delete;

 private:
  struct Impl;
  // Validates and compiles a parsed RuleSet (shared by the text and binary factories).
  static absl::StatusOr<std::shared_ptr<const RuleSet>> Compile(std::unique_ptr<Impl> impl,
                                                                std::string_view origin);
  // Lets the factories use std::make_shared while nobody else can construct a RuleSet.
  struct Passkey {
    explicit Passkey() = default;
  };

 public:
  RuleSet(Passkey, std::unique_ptr<const Impl> impl);

 private:
  std::unique_ptr<const Impl> impl_;
};

// Worst-of for verdicts: DANGEROUS > SUSPICIOUS > ERROR > SAFE (findings win over errors).
v1::Verdict WorseVerdict(v1::Verdict a, v1::Verdict b);

}  // namespace ckptscan::rules

#endif  // CKPTSCAN_RULES_RULE_SET_H_
