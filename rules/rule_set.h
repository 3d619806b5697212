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

  // A local overlay: the RuleSet schema (`version` optional), parsed as FromTextProto parses,
  // with the same size limit and UTF-8 check. Its entries are validated by WithOverlay.
  static absl::StatusOr<v1::RuleSet> ParseOverlayText(std::string_view text,
                                                      std::string_view origin);
  static absl::StatusOr<v1::RuleSet> ReadOverlayFile(const std::string& path);

  // The entry `--allow NAME` adds to an overlay: "module.qualname" split at the last dot, or
  // "module:qualname" for a dotted qualname ("pkg.mod:Outer.Inner"). The name is trusted the way
  // torch.serialization.add_safe_globals trusts it: it may be called by any call opcode with any
  // arguments (which are still judged), given any BUILD state, and filled by SETITEM(S) and
  // APPEND(S). InvalidArgument for an empty part, whitespace, '*' or a name over
  // kMaxGradedNameBytes.
  static absl::StatusOr<v1::AllowedGlobal> TrustedName(std::string_view spec);

  // `base` with `overlay`'s allow and deny entries added. Refused (InvalidArgument naming the
  // entry, "rules <origin>: allow[2] (os.system): ..."): an allow entry for a name `base`
  // already allowlists (an overlay cannot change a built-in entry's shapes), for a name `base`
  // grades DANGEROUS (a dangerous deny entry matches it, or it has a dangerous dunder
  // component), a repeated entry, or any entry a rules file may not hold. The result's
  // version() is "<base version>+overlay-sha256-<overlay_sha256>": every report names both
  // the rules and the overlay (the caller computes the digest of the overlay's bytes).
  static absl::StatusOr<std::shared_ptr<const RuleSet>> WithOverlay(
      const RuleSet& base, const v1::RuleSet& overlay, std::string_view overlay_sha256,
      std::string_view origin);

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
