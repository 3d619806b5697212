// libFuzzer target: the rules-file loader (rules/rule_set.h): the input as a text-format
// RuleSet (what `--rules FILE` and the daemon's reload read) and as a binary one.
//
// Invariants: a rule set that loads round-trips (its proto, re-encoded, loads as binary with
// the same version) and evaluates facts — a benign pickle, a dangerous call, an unlisted
// global — without crashing, never SAFE beside a finding, within kMaxFindings.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/pickle/vm.h"
#include "rules/rule_set.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

// The shipped rules are ~25 KiB of text.
constexpr size_t kMaxInputBytes = 128 << 10;

// Facts every rule set is evaluated against.
const std::vector<ckptscan::pickle::StreamFacts>& Samples() {
  static const std::vector<ckptscan::pickle::StreamFacts> samples = [] {
    const ckptscan::pickle::Vm vm;
    std::vector<ckptscan::pickle::StreamFacts> out;
    for (std::string_view p : {
             std::string_view("\x80\x02}q\x00(X\x01\x00\x00\x00aK\x01u.", 16),
             std::string_view("cposix\nsystem\n(S'id'\ntR."),
             std::string_view("ccollections\nOrderedDict\n)R(Vw\nctorch._utils\n"
                              "_rebuild_tensor_v2\n(tRsb."),
             std::string_view("cbuiltins\ngetattr\n(cos\nenviron\nVget\ntR(Vx\ntR."),
         }) {
      out.push_back(vm.ScanStream(p));
    }
    return out;
  }();
  return samples;
}

void Evaluate(const ckptscan::rules::RuleSet& rs) {
  for (const ckptscan::pickle::StreamFacts& facts : Samples()) {
    const ckptscan::rules::Evaluation ev = rs.Evaluate(facts, "fuzz");
    if (!ev.findings.empty()) {
      CKPT_FUZZ_CHECK(ev.verdict != ckptscan::v1::VERDICT_SAFE, "SAFE with %zu findings",
                      ev.findings.size());
    }
    CKPT_FUZZ_CHECK(ev.findings.size() <= ckptscan::rules::RuleSet::kMaxFindings + 1,
                    "%zu findings", ev.findings.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptscan;
  if (size > kMaxInputBytes) return -1;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> text =
      rules::RuleSet::FromTextProto(bytes, "fuzz.textproto");
  if (text.ok()) {
    Evaluate(**text);
    std::string binary;
    CKPT_FUZZ_CHECK((*text)->proto().SerializeToString(&binary), "cannot serialize");
    absl::StatusOr<std::shared_ptr<const rules::RuleSet>> back =
        rules::RuleSet::FromBinaryProto(binary, "fuzz.binpb");
    CKPT_FUZZ_CHECK(back.ok(), "a loaded rule set does not load back: %s",
                    back.status().ToString().c_str());
    CKPT_FUZZ_CHECK((*back)->version() == (*text)->version(), "version changed");
  }
  absl::StatusOr<std::shared_ptr<const rules::RuleSet>> binary =
      rules::RuleSet::FromBinaryProto(bytes, "fuzz.binpb");
  if (binary.ok()) Evaluate(**binary);
  return 0;
}
