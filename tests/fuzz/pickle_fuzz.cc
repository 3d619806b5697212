// libFuzzer target: the symbolic pickle VM (core/pickle/vm.h), both loaders, every pickle of a
// stream and the nested pass, then the default rules over the facts.
//
// Invariants (facts_check.h): every id of every graph resolves, offsets lie in the stream, a
// pickle that parsed whole has a root, nested pickles follow their parents, the printers stay
// bounded; the rules never report SAFE beside a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/pickle/vm.h"
#include "rules/rule_set.h"
#include "tests/fuzz/facts_check.h"

namespace {

// Bigger inputs only repeat what smaller ones reach; the fixtures are at most ~20 KiB.
constexpr size_t kMaxInputBytes = 64 << 10;
// Where the stream pretends to start in its file (offsets must be shifted by it).
constexpr uint64_t kBaseOffset = 1000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  static const pickle::Limits limits = fuzz::SmallPickleLimits();
  static const std::shared_ptr<const rules::RuleSet> rule_set = rules::RuleSet::Default();

  for (pickle::Loader loader : {pickle::Loader::kPickle, pickle::Loader::kJoblib}) {
    const pickle::Vm vm(limits, loader);
    // The disassembler's sink: every event's strings must be readable (ASan checks).
    uint64_t traced_bytes = 0;
    const pickle::TraceSink trace = [&traced_bytes](const pickle::TraceEvent& e) {
      traced_bytes += e.arg.size() + e.note.size();
    };
    const pickle::StreamFacts facts = vm.ScanStream(bytes, kBaseOffset, &trace);
    ckptscan::fuzz::CheckStreamFacts(facts, kBaseOffset, size, limits);

    const rules::Evaluation ev = rule_set->Evaluate(facts, "fuzz");
    if (!ev.findings.empty()) {
      CKPT_FUZZ_CHECK(ev.verdict != v1::VERDICT_SAFE, "%zu findings, verdict SAFE",
                      ev.findings.size());
    }
    CKPT_FUZZ_CHECK(ev.findings.size() <= rules::RuleSet::kMaxFindings + 1, "%zu findings",
                    ev.findings.size());
  }
  return 0;
}
